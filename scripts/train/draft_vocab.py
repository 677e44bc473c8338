"""Ranks the target's vocabulary by how often the target itself outputs each id, for a
drafter's draft vocabulary (`draft_vocab.json` beside its config: the engine's
`drafters/draft_vocab.rs` scores only the first `draft_vocab_size` ids, topped up in id order).

Input: `dspark bench --baseline-only` JSON files, whose `baseline.ids` hold the target's greedy
outputs; each output is cut after its first end-of-turn id. Make them from prompts of the
training kind, never the held-out sets (MT-Bench, HumanEval):

    (cd scripts/train && python3 draft_vocab.py --write-prompts /tmp/p.jsonl --count 400)
    dspark bench --model demo --baseline-only --prompt-set /tmp/p.jsonl --prompts 400 \\
        --max-tokens 160 --out /tmp/gen.json
    python3 scripts/train/draft_vocab.py /tmp/gen.json [more.json..] \\
        --out assets/drafters/X/draft_vocab.json
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys


def write_prompts(path: str, count: int, code_share: float, seed: int) -> None:
    """`count` prompts of the training data's kinds: chat templates over its seed topics and,
    a `code_share` of them, HumanEval-shaped tasks from library docstrings."""
    import prompt_sources  # the training data's own prompt sources (held-out sets excluded)

    rng = random.Random(seed)
    chat = prompt_sources.template_prompts()
    code = [text for _, text in prompt_sources.code_prompts(rng)]
    rng.shuffle(chat)
    rng.shuffle(code)
    n_code = round(count * code_share)
    prompts = chat[: count - n_code] + code[:n_code]
    rng.shuffle(prompts)
    with open(path, "w") as f:  # JSON lines: code prompts keep their line breaks
        f.writelines(json.dumps({"prompt": p}) + "\n" for p in prompts)
    print(f"wrote {len(prompts)} prompts ({n_code} code) to {path}")


def rank(files: list[str], stops: set[int]) -> tuple[list[int], collections.Counter[int], int]:
    counts: collections.Counter[int] = collections.Counter()
    outputs = 0
    for path in files:
        with open(path) as f:
            for ids in json.load(f)["baseline"]["ids"]:
                for t in ids:
                    counts[t] += 1
                    if t in stops:
                        break
                outputs += 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    return ranked, counts, outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_json", nargs="*")
    ap.add_argument("--out")
    ap.add_argument("--stop-ids", default="2", help="end-of-turn ids, comma-separated (SmolLM2: 2)")
    ap.add_argument("--write-prompts", help="write training-kind prompts to this file and stop")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--code-share", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--size", type=int, help="the drafter's default draft-vocabulary size (the "
                    "file's \"size\"; --draft-vocab and the config's draft_vocab_size override it)")
    a = ap.parse_args()
    if a.write_prompts:
        write_prompts(a.write_prompts, a.count, a.code_share, a.seed)
        return
    if not a.bench_json or not a.out:
        sys.exit("give bench JSON files and --out (or --write-prompts)")
    stops = {int(x) for x in a.stop_ids.split(",") if x}
    ranked, counts, outputs = rank(a.bench_json, stops)
    tokens = sum(counts.values())
    doc = {
        "ids": ranked,
        "source": f"the target's greedy outputs to {outputs} training-kind prompts "
        f"(scripts/train/draft_vocab.py, seed {a.seed}): {tokens} tokens, {len(ranked)} distinct ids, "
        "most frequent first (ties by id)",
    }
    if a.size:
        doc["size"] = a.size
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    for k in (1024, 4096, 8192, 16384):
        share = sum(counts[t] for t in ranked[:k]) / max(tokens, 1)
        print(f"top {k} ids: {100 * share:.2f}% of the counted tokens")
    print(f"wrote {a.out}: {len(ranked)} ids from {tokens} tokens of {outputs} outputs")


if __name__ == "__main__":
    main()
