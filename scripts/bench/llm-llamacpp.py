"""llama.cpp's side of scripts/bench/llm-baseline.sh: the same GGUF file, the same messages (read
from `ragbox bench llm --json` on stdin), the same threads, greedy decoding, timed the way ragbox
times itself (wall clock around a chat request: template, tokenisation and sampling included).

Prints one JSON line: prompt processing and generation tokens/s (medians), and llama.cpp's own
internal counters (llama_perf_context) for the last run of each.
"""
import argparse
import json
import statistics
import sys
import time

import llama_cpp
from llama_cpp import Llama


def perf(llm):
    p = llama_cpp.llama_perf_context(llm.ctx)
    return {"t_p_eval_ms": p.t_p_eval_ms, "n_p_eval": p.n_p_eval, "t_eval_ms": p.t_eval_ms, "n_eval": p.n_eval}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    spec = json.loads(sys.stdin.read())

    started = time.perf_counter()
    llm = Llama(model_path=args.model, n_ctx=2048, n_batch=512, n_threads=args.threads,
                n_threads_batch=args.threads, verbose=False, seed=0)
    load_s = time.perf_counter() - started

    def chat(user, max_tokens):
        llm.reset()  # no KV reuse between runs: every prompt is processed in full
        llama_cpp.llama_perf_context_reset(llm.ctx)
        messages = [{"role": "system", "content": spec["prompt_system"]}, {"role": "user", "content": user}]
        t0 = time.perf_counter()
        first = None
        pieces = 0
        for chunk in llm.create_chat_completion(messages, max_tokens=max_tokens, temperature=0.0, stream=True):
            delta = chunk["choices"][0]["delta"].get("content")
            if delta:
                pieces += 1
                if first is None:
                    first = time.perf_counter() - t0
        total = time.perf_counter() - t0
        return first or total, total, perf(llm)

    prompt_user = spec["prompt_user"]
    gen_user = spec["gen_user"]
    chat(prompt_user.replace("Run 0.", "Run 99."), 1)  # warm-up
    prompt_runs, prompt_tokens, prompt_perf = [], 0, None
    for run in range(1, args.runs + 1):
        first, _, p = chat(prompt_user.replace("Run 0.", f"Run {run}."), 1)
        prompt_runs.append(first)
        prompt_tokens, prompt_perf = p["n_p_eval"], p
    gen_runs, gen_tokens, gen_perf = [], 0, None
    for run in range(1, args.runs + 1):
        first, total, p = chat(f"Run {run}. {gen_user}", args.gen_tokens)
        n = p["n_eval"] + 1  # n_eval counts decoded tokens after the prompt's first sample
        gen_runs.append((n - 1) / max(total - first, 1e-9))
        gen_tokens, gen_perf = n, p
    print(json.dumps({
        "engine": "llama.cpp (llama-cpp-python " + llama_cpp.__version__ + ")",
        "threads": args.threads,
        "load_s": load_s,
        "prompt_tokens": prompt_tokens,
        "prompt_tokens_per_s": prompt_tokens / statistics.median(prompt_runs),
        "prompt_runs_s": prompt_runs,
        "gen_tokens": gen_tokens,
        "gen_tokens_per_s": statistics.median(gen_runs),
        "gen_runs_tokens_per_s": gen_runs,
        "internal_prompt": prompt_perf,
        "internal_gen": gen_perf,
    }))


if __name__ == "__main__":
    main()
