#!/usr/bin/env python3
"""Starts the Milvus standalone server of the pinned PyPI wheel (milvus==2.3.5) in the
foreground, as the process that runs this script (exec), so that whoever started it can stop it.

    milvus-launch.py DATA_DIR PROXY_PORT METRICS_PORT [--auth]

The wheel's own config writer lays out DATA_DIR (configs/milvus.yaml, logs/, data/), with the
gRPC proxy on PROXY_PORT and every other port it needs free ones from its defaults; the binaries
come from $RAGBOX_MILVUS_RUNTIME/bin, unpacked once by scripts/setup/shared-servers.sh. Milvus
listens on every interface: the test suite runs it only inside a network namespace that has
nothing but loopback.
"""
import os
import socket
import sys

import milvus

data, port, metrics = os.path.abspath(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
auth = "--auth" in sys.argv[4:]
bin_dir = os.path.join(os.environ["RAGBOX_MILVUS_RUNTIME"], "bin")
config = milvus.MilvusServerConfig(data_dir=data, proxy_port=port, authorization_enabled=auth)


def try_bind_port(p):
    """The wheel's port probe, with SO_REUSEADDR: a restarted server takes its ports back even
    while connections to the one it replaces linger in TIME_WAIT."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", p))
        sock.listen()
        return sock
    except OSError:
        sock.close()
        return None


config.try_bind_port = try_bind_port
# The constructor's keyword only records the wish; the template's item is what the written
# configuration takes (left alone, authorisation stays off and anyone signs in).
config.configurable_items["authorization_enabled"][1] = auth
config.resolve()
env = dict(os.environ)
env.update(
    DEPLOY_MODE="STANDALONE",
    METRICS_PORT=str(metrics),
    MILVUS_RUN_DIR=os.path.join(data, "run"),
    LD_LIBRARY_PATH=bin_dir,
)
os.chdir(data)
os.execve(os.path.join(bin_dir, "milvus"), ["milvus", "run", "standalone"], env)
