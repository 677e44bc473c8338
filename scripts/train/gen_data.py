#!/usr/bin/env python3
"""Training data for the SmolLM2-135M drafters: prompts, then the target's own responses.

Prompt sources (MT-Bench and HumanEval are never read here: they are held out for evaluation):
  1. self-instruct: the demo model itself writes questions/instructions from seed topics and
     task styles written in this file (sampled, T=1.0, top-p 0.95), first line kept, deduped;
  2. templates: the same seed topics in fixed request templates written in this file;
  3. code: function names, signatures, one-line summaries and source of public functions in
     registry packages installed next to torch (numpy, scipy, networkx, sympy; all BSD-3-Clause),
     turned into "write this function" / "explain this code" requests.
Responses: the target through its chat template (dspark's rendering), greedy for half of the
prompts and sampled (T=0.7, top-p 0.9) for the other half, up to --max-new tokens, cut after eos.

Output: a torch file {"seqs": [[ids]], "plens": [prompt lengths], "kinds": [...], "meta": {...}}.

  python scripts/train/gen_data.py --gguf-dir DIR --out /tmp/w/data.pt [--budget-s 300]
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TOPICS = """
cooking pasta; baking bread; vegetarian recipes; coffee brewing; wine regions of France; nutrition and diet;
marathon training; yoga; sleep hygiene; first aid; the human heart; vaccines; the immune system; genetics;
evolution; photosynthesis; black holes; the solar system; Mars exploration; climate change; volcanoes;
earthquakes; ocean currents; rainforests; bees and pollination; dinosaurs; quantum mechanics; relativity;
electricity and circuits; magnets; thermodynamics; chemical reactions; the periodic table; acids and bases;
linear algebra; calculus; probability; statistics; prime numbers; geometry; graph theory; cryptography;
machine learning; neural networks; databases; SQL queries; operating systems; computer networks; the internet;
web development; JavaScript; Python programming; Rust programming; C programming; algorithms and data structures;
sorting algorithms; recursion; object-oriented design; unit testing; version control with git; cloud computing;
cybersecurity; smartphones; electric cars; renewable energy; solar panels; nuclear power; space travel;
the Roman Empire; ancient Egypt; the Renaissance; the French Revolution; World War II; the Cold War;
the history of China; the Silk Road; the industrial revolution; democracy; economics; inflation; stock markets;
personal finance; starting a small business; marketing; job interviews; writing a resume; public speaking;
time management; leadership; negotiation; psychology; habits; memory and learning; philosophy of mind; ethics;
Shakespeare; poetry; mystery novels; science fiction; film making; photography; painting; classical music; jazz;
learning a language; travel in Japan; travel in Italy; hiking; camping; gardening; house plants; dogs; cats;
birds; chess; football; basketball; the Olympics; video games; board games; architecture; city planning;
public transport; recycling; plastic pollution; water purification; agriculture; the printing press;
smartphones and children; social media; online privacy; artificial intelligence ethics; robotics; 3D printing;
mathematics puzzles; logic puzzles; riddles; family relationships; friendship; wedding planning; moving house;
home repairs; budgeting for students; climate-friendly habits; mythology; world religions; languages of India
""".replace("\n", " ").split(";")
TOPICS = [t.strip() for t in TOPICS if t.strip()]

STYLES = [
    "Write one question that someone might ask an AI assistant about {t}. Reply with only the question.",
    "Write one instruction that a user could give an AI assistant about {t}. Reply with only the instruction.",
    "Write a creative writing request (a poem, a short story, an email or a blog post) about {t}. "
    "Reply with only the request.",
    "Write a short math or logic word problem involving {t}. Reply with only the problem.",
    "Write a question that asks for an explanation of one concept from {t}. Reply with only the question.",
    "Write a request for practical advice about {t}. Reply with only the request.",
    "Write a question that asks to compare two things related to {t}. Reply with only the question.",
    "Write a request for a step-by-step guide about {t}. Reply with only the request.",
    "Write a role-play request in which the user asks the assistant to act as an expert on {t}. "
    "Reply with only the request.",
    "Write a short paragraph about {t}, then ask for a one-sentence summary of it.",
]

TEMPLATES = [
    "Explain {t} in simple terms.",
    "What are the most important things to know about {t}?",
    "Write a short poem about {t}.",
    "Give me three tips related to {t}.",
    "Write a persuasive paragraph about why {t} matters.",
    "Describe {t} to a ten-year-old.",
    "What are common misconceptions about {t}?",
    "Write a short dialogue between two friends discussing {t}.",
    "Summarize the history of {t} in a few sentences.",
    "Create a quiz with three questions about {t}, with answers.",
]

CODE_PACKAGES = {
    "numpy": ["numpy.lib._function_base_impl", "numpy.lib._shape_base_impl", "numpy.lib._arraysetops_impl",
              "numpy.lib._nanfunctions_impl", "numpy.lib._polynomial_impl", "numpy.lib._twodim_base_impl",
              "numpy._core.numeric", "numpy._core.fromnumeric"],
    "scipy": ["scipy.special._basic", "scipy.stats._stats_py", "scipy.optimize._optimize",
              "scipy.signal._signaltools", "scipy.interpolate._interpolate"],
    "networkx": ["networkx.algorithms.shortest_paths.unweighted", "networkx.algorithms.shortest_paths.weighted",
                 "networkx.algorithms.cycles", "networkx.algorithms.dag", "networkx.algorithms.cluster",
                 "networkx.algorithms.components.connected", "networkx.algorithms.traversal.depth_first_search",
                 "networkx.algorithms.traversal.breadth_first_search", "networkx.algorithms.matching",
                 "networkx.algorithms.bipartite.basic", "networkx.generators.classic", "networkx.algorithms.tree.mst"],
    "sympy": ["sympy.ntheory.factor_", "sympy.ntheory.primetest", "sympy.ntheory.generate",
              "sympy.utilities.iterables", "sympy.combinatorics.permutations"],
}


def code_prompts(rng: random.Random, limit: int) -> list[str]:
    out = []
    for pkg, mods in CODE_PACKAGES.items():
        for name in mods:
            try:
                mod = importlib.import_module(name)
            except Exception as e:  # noqa: BLE001  (a package version without that module)
                print(f"  skip {name}: {e}", flush=True)
                continue
            for fname, fn in inspect.getmembers(mod, inspect.isfunction):
                if fname.startswith("_") or fn.__module__ != mod.__name__:
                    continue
                doc = inspect.getdoc(fn) or ""
                summary = doc.strip().split("\n")[0].strip().rstrip(".")
                try:
                    sig = str(inspect.signature(fn))
                    src = inspect.getsource(fn)
                except (TypeError, ValueError, OSError):
                    continue
                if summary and len(sig) < 120:
                    s = summary[0].lower() + summary[1:]
                    out.append(f"Write a Python function `{fname}{sig}` that does the following: {s}.")
                    out.append(f"Implement `{fname}` in plain Python (no libraries): {s}.")
                if len(src) < 1400:
                    out.append(f"Explain what this Python function does:\n```python\n{src}```")
                body = src.replace(f'"""{doc}"""', "") if doc else src
                if doc and len(body) < 1000:
                    out.append(f"Write a docstring for this Python function:\n```python\n{body}```")
    rng.shuffle(out)
    return out[:limit]


def clean_instruction(text: str) -> str | None:
    t = text.strip().strip('"').strip()
    for pre in ("Question:", "Instruction:", "Request:", "Task:", "Problem:"):
        if t.startswith(pre):
            t = t[len(pre):].strip()
    if "Write a short paragraph" in t:
        return None
    if len(t) < 15 or len(t) > 600:
        return None
    return t


def self_instruct(tok, model, template, rng, per_style, device, batch):
    metas = [s.format(t=t) for t in TOPICS for s in STYLES]
    prompts = [common.chat_ids(tok, template, m) for m in metas for _ in range(per_style)]
    out, seen = [], set()
    for i in range(0, len(prompts), batch):
        gen = common.batched_generate(model, prompts[i:i + batch], 96, sample=True, temperature=1.0,
                                      top_p=0.95, device=device)
        for g in gen:
            text = tok.decode([t for t in g if t not in common.EOS_IDS], skip_special_tokens=True,
                              clean_up_tokenization_spaces=False)
            c = clean_instruction(text)
            if c and c not in seen:
                seen.add(c)
                out.append(c)
    rng.shuffle(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--max-prompt", type=int, default=448)
    ap.add_argument("--per-style", type=int, default=3, help="self-instruct samples per topic x style")
    ap.add_argument("--code-limit", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--limit", type=int, default=0, help="cap on prompts (0 = all)")
    ap.add_argument("--max-topics", type=int, default=0, help="use only the first N topics (smoke tests)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop generating responses after this")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    t0 = time.time()
    if a.max_topics:
        del TOPICS[a.max_topics:]
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    tok, model, template = common.load_target(a.gguf_dir, a.device)
    print(f"target loaded in {time.time() - t0:.1f}s", flush=True)

    si = [] if a.per_style == 0 else self_instruct(tok, model, template, rng, a.per_style, a.device, a.batch * 2)
    print(f"self-instruct: {len(si)} prompts ({time.time() - t0:.1f}s)", flush=True)
    tp = [t.format(t=x) for x in TOPICS for t in TEMPLATES]
    cp = code_prompts(rng, a.code_limit)
    print(f"templates: {len(tp)}, code: {len(cp)}", flush=True)
    items = [("self-instruct", p) for p in si] + [("template", p) for p in tp] + [("code", p) for p in cp]
    rng.shuffle(items)
    if a.limit:
        items = items[:a.limit]

    enc = []
    for i, (kind, p) in enumerate(items):
        ids = common.chat_ids(tok, template, p)
        if len(ids) <= a.max_prompt:
            enc.append((kind, ids, i % 2 == 1))  # odd: sampled, even: greedy
    seqs, plens, kinds, modes = [], [], [], []
    t1 = time.time()
    # greedy on even prompts, sampled on odd ones, then more sampled passes while time is left
    passes = [(False, 0.4), (True, 1.0)] + [(True, 1.0)] * 4
    for pi, (sample, share) in enumerate(passes):
        group = [e for e in enc if pi >= 2 or e[2] == sample]
        order = sorted(range(len(group)), key=lambda j: len(group[j][1]))
        chunks = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]
        random.Random(a.seed + pi).shuffle(chunks)
        name = "sampled" if sample else "greedy"
        for ci, ch in enumerate(chunks):
            if time.time() - t1 > a.budget_s * share:
                print(f"  budget reached: pass {pi} ({name}) chunk {ci}/{len(chunks)}", flush=True)
                break
            prompts = [group[j][1] for j in ch]
            gen = common.batched_generate(model, prompts, a.max_new, sample=sample, device=a.device)
            for j, g in zip(ch, gen):
                seqs.append(group[j][1] + g)
                plens.append(len(group[j][1]))
                kinds.append(group[j][0])
                modes.append(name)
            print(f"  pass {pi} ({name}) chunk {ci + 1}/{len(chunks)}: {len(seqs)} seqs "
                  f"({time.time() - t0:.0f}s)", flush=True)
        if time.time() - t1 > a.budget_s:
            break
    ntok = sum(len(s) - p for s, p in zip(seqs, plens))
    meta = {"seed": a.seed, "prompts": len(enc), "seqs": len(seqs), "response_tokens": ntok,
            "by_kind": {k: kinds.count(k) for k in set(kinds)}, "greedy": modes.count("greedy"),
            "sampled": modes.count("sampled"), "max_new": a.max_new, "seconds": round(time.time() - t0, 1),
            "sources": {"self-instruct": "SmolLM2-135M-Instruct generations (Apache-2.0 model)",
                        "template": "templates and topics written in scripts/train/gen_data.py",
                        "code": "numpy, scipy, networkx, sympy function signatures/docstrings/source "
                                "(BSD-3-Clause)"}}
    torch.save({"seqs": seqs, "plens": plens, "kinds": kinds, "modes": modes, "meta": meta}, a.out)
    print("data:", meta, flush=True)
    ex = [i for i in range(len(seqs))][:3]
    for i in ex:
        print("---", kinds[i], modes[i], repr(tok.decode(seqs[i][plens[i]:])[:300]), flush=True)


if __name__ == "__main__":
    main()
