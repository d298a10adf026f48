#!/usr/bin/env python3
"""Trains the reader (crates/core/src/rerank/reader.rs): a small network over the cross-encoder's
last-layer states and logit of (question, unit in its context) that says whether the unit states the
answer. Writes the weights as safetensors, the input standardisation folded into the first layer.

    python3 -m venv ~/.cache/ragbox/train-venv
    ~/.cache/ragbox/train-venv/bin/pip install numpy==2.2.6 scikit-learn==1.7.2 safetensors==0.6.2
    scripts/train/reader-data.py E/examples.jsonl
    ragbox eval --reader-features E/examples.jsonl --out E/features
    ~/.cache/ragbox/train-venv/bin/python scripts/train/reader.py E/examples.jsonl E/features \\
        --write models/models--ragbox--reader/snapshots/REV/reader.safetensors

Trained on the `train` split; every figure printed is on the `held-out` split (other articles and
pages than the training ones): for each source, of the questions the passage answers, the share
answered with the evidence unit, answered with another unit, and declined; of those it does not
answer, the share declined; at each floor. `--quick` trains on a fifth of the training examples
(a smoke run). The seed is fixed; the same inputs give the same weights.
"""
import argparse, collections, hashlib, json, os, sys, time

import numpy as np
from safetensors.numpy import save_file
from sklearn.neural_network import MLPClassifier

SEED = 20261207
# The organisational questions weigh this many times a training set: they are what the reader reads.
ORG_WEIGHT = 2.0
FLOORS = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]


def load(pairs):
    """Examples, units and states from (examples file, features folder) pairs, in order."""
    examples, units, xs = {}, [], []
    for examples_path, features_dir in pairs:
        for line in open(examples_path, encoding="utf-8"):
            e = json.loads(line)
            examples[e["id"]] = e
        mine = [json.loads(l) for l in open(os.path.join(features_dir, "units.jsonl"), encoding="utf-8")]
        units += mine
        xs.append(np.fromfile(os.path.join(features_dir, "states.f32"), dtype="<f4").reshape(len(mine), -1))
    return examples, units, np.concatenate(xs)


ORGANISATIONAL = ("sourcegraph-handbook", "owasp-cheatsheets", "code-with-engineering-playbook", "pagerduty-incident-response")


def group(source):
    """selqa, squad2, or org (the four organisational collections)."""
    s = source.split(":")[0]
    return "org" if s in ORGANISATIONAL else {"selqa-other": "selqa"}.get(s, s)


def shown(source):
    """The rows the figures are given for: org questions by kind, the others by set."""
    s, _, kind = source.partition(":")
    if kind == "swap":
        return "swap"
    return f"org:{kind}" if s in ORGANISATIONAL else group(source)


def weights(units, examples, ids):
    """Each example weighs the same within its source, and each source group the same: the
    positives of an answered example share half its weight, its other units the other half."""
    per = collections.defaultdict(list)
    for i in ids:
        per[units[i]["id"]].append(i)
    by_group = collections.Counter(group(examples[e]["source"]) for e in per)
    w = np.zeros(len(units))
    for e, rows in per.items():
        g = group(examples[e]["source"])
        total = (ORG_WEIGHT if g == "org" else 1.0) / by_group[g]
        pos = [i for i in rows if units[i]["label"]]
        neg = [i for i in rows if not units[i]["label"]]
        for part, share in ((pos, 0.5), (neg, 0.5 if pos else 1.0)):
            for i in part:
                w[i] = total * share / len(part)
    return w * len(ids) / w.sum()


def question_level(units, examples, ids, p):
    """Per example: (source, answerable, best probability, whether the best unit is evidence)."""
    best = {}
    for i in ids:
        e = units[i]["id"]
        if e not in best or p[i] > best[e][0]:
            best[e] = (p[i], units[i]["label"])
    return [(shown(examples[e]["source"]), bool(examples[e]["evidence"]), b, l) for e, (b, l) in best.items()]


def report(rows, label):
    out = {}
    print(f"\n{label}: held-out questions (answerable: right / wrong unit / declined; unanswerable: declined)")
    sources = sorted({r[0] for r in rows})
    for floor in FLOORS:
        cells = []
        for s in sources + ["all"]:
            mine = [r for r in rows if s == "all" or r[0] == s]
            a = [r for r in mine if r[1]]
            u = [r for r in mine if not r[1]]
            right = sum(1 for r in a if r[2] >= floor and r[3]) / max(len(a), 1)
            wrong = sum(1 for r in a if r[2] >= floor and not r[3]) / max(len(a), 1)
            declined = sum(1 for r in a if r[2] < floor) / max(len(a), 1)
            refused = sum(1 for r in u if r[2] < floor) / max(len(u), 1) if u else None
            out.setdefault(str(floor), {})[s] = dict(answerable=len(a), right=right, wrong=wrong, declined=declined, unanswerable=len(u), declined_unanswerable=refused)
            cells.append(f"{s} " + (f"{right:.2f}/{wrong:.2f}/{declined:.2f}" if a else "") + (f" u{refused:.2f}" if refused is not None else ""))
        print(f"floor {floor}: " + " | ".join(cells))
    return out


def fold(model, mean, std):
    """The network's weights with (x - mean) / std folded into the first layer, as the Rust
    head reads them: hidden.weight [h, d], hidden.bias [h], out.weight [1, h], out.bias [1]."""
    w1, w2 = model.coefs_
    b1, b2 = model.intercepts_
    w1 = w1 / std[:, None]
    b1 = b1 - (mean[:, None] * w1).sum(0)
    return {
        "hidden.weight": np.ascontiguousarray(w1.T.astype("<f4")),
        "hidden.bias": b1.astype("<f4"),
        "out.weight": np.ascontiguousarray(w2.T.astype("<f4")),
        "out.bias": b2.astype("<f4"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("examples")
    ap.add_argument("features")
    ap.add_argument("--more", nargs=2, action="append", default=[], metavar=("EXAMPLES", "FEATURES"),
                    help="another examples file and its features (the same recipe's output, dumped in parts)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=1e-3, help="L2 penalty")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", help="where to write reader.safetensors")
    ap.add_argument("--json", help="write the held-out figures here")
    args = ap.parse_args()
    examples, units, x = load([(args.examples, args.features)] + args.more)
    split = np.array([examples[u["id"]]["split"] for u in units])
    y = np.array([u["label"] for u in units])
    train = np.where(split == "train")[0]
    held = np.where(split == "held-out")[0]
    if args.quick:
        keep = {e for e in {units[i]["id"] for i in train} if int(hashlib.sha1(e.encode()).hexdigest(), 16) % 5 == 0}
        train = np.array([i for i in train if units[i]["id"] in keep])
    mean, std = x[train].mean(0), x[train].std(0) + 1e-6
    xs = (x - mean) / std
    w = weights(units, examples, train)[train]
    print(f"{len(train)} training units ({int(y[train].sum())} evidence) from {len({units[i]['id'] for i in train})} examples; "
          f"{len(held)} held-out units from {len({units[i]['id'] for i in held})} examples; width {x.shape[1]}")
    started = time.time()
    model = MLPClassifier(hidden_layer_sizes=(args.hidden,), alpha=args.alpha, batch_size=256, learning_rate_init=1e-3,
                          max_iter=args.epochs, random_state=SEED, n_iter_no_change=args.epochs, tol=0.0)
    model.fit(xs[train], y[train], sample_weight=w)
    seconds = time.time() - started
    print(f"trained {model.n_iter_} epochs in {seconds:.0f} s; final training loss {model.loss_:.4f}")
    p = model.predict_proba(xs)[:, 1]
    baseline = 1 / (1 + np.exp(-x[:, -1]))
    report(question_level(units, examples, held, baseline), "the cross-encoder's logit alone (sigmoid)")
    figures = report(question_level(units, examples, held, p), "the reader")
    if args.json:
        json.dump(dict(seconds=seconds, epochs=model.n_iter_, loss=model.loss_, loss_curve=model.loss_curve_, hidden=args.hidden,
                       alpha=args.alpha, train_units=len(train), held_out=figures), open(args.json, "w"), indent=1)
    if args.write:
        os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
        tensors = fold(model, mean, std)
        # No metadata: its order in the header is not fixed, and the same run must give the same bytes.
        save_file(tensors, args.write)
        # The folded network gives the same probabilities as the fitted one.
        h = np.maximum(x[held] @ tensors["hidden.weight"].T + tensors["hidden.bias"], 0)
        q = 1 / (1 + np.exp(-(h @ tensors["out.weight"].T + tensors["out.bias"]).ravel()))
        assert np.abs(q - p[held]).max() < 1e-3, np.abs(q - p[held]).max()
        print(f"wrote {args.write}")


if __name__ == "__main__":
    sys.exit(main())
