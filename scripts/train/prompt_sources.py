"""Prompt sources for the drafter training data (second data set). Everything here is written in
this file or read from the Python installation that runs it:

  * seed topics, MT-Bench-like task styles by category, user personas and follow-up turns:
    written here; the target turns (topic, style, persona) into a user request (self-instruct);
  * HumanEval-shaped code-completion prompts (imports, a signature and a docstring, nothing
    else) built from public functions of the Python standard library (PSF licence) and of
    numpy, scipy, networkx and sympy where installed (BSD-3-Clause);
  * reading / extraction tasks over passages of `pydoc_data.topics` (the Python language
    reference text shipped with the standard library, PSF licence) and stdlib module docstrings.

MT-Bench and HumanEval are only read by `Excluder`, to drop any prompt that shares an 8-word run
with them (or a HumanEval function name): they stay held out.
"""
from __future__ import annotations

import gzip
import importlib
import inspect
import json
import random
import re

TOPICS_BY_CATEGORY = {
    "everyday": """cooking pasta; baking bread; vegetarian recipes; coffee brewing; tea ceremonies; meal prep on a
        budget; food allergies; grocery shopping; cleaning a kitchen; laundry; organizing a closet; minimalism;
        moving house; home repairs; plumbing leaks; painting a room; gardening; house plants; composting;
        raising chickens; dogs; cats; aquariums; birdwatching; wedding planning; birthday parties; gift ideas;
        family relationships; friendship; parenting toddlers; teenagers and phones; caring for elderly parents;
        sleep hygiene; morning routines; time management; procrastination; habits; decluttering; commuting;
        buying a used car; car maintenance; cycling in a city; public transport; renting an apartment""",
    "health": """nutrition and diet; vitamins; marathon training; yoga; weight lifting; swimming; first aid;
        the human heart; the immune system; vaccines; antibiotics; sleep and memory; stress management;
        meditation; mental health; dental care; skin care; posture; running injuries; hydration; the brain;
        the digestive system; allergies; diabetes; blood pressure; healthy aging""",
    "science": """photosynthesis; cell biology; DNA and genetics; evolution; ecosystems; bees and pollination;
        coral reefs; rainforests; deserts; dinosaurs; fossils; black holes; the solar system; exoplanets;
        Mars exploration; the Moon landing; telescopes; the Big Bang; quantum mechanics; relativity; light and
        optics; sound waves; electricity and circuits; magnetism; thermodynamics; entropy; chemical reactions;
        the periodic table; acids and bases; polymers; nuclear physics; particle accelerators; volcanoes;
        earthquakes; plate tectonics; ocean currents; weather forecasting; hurricanes; climate change;
        glaciers; the water cycle; soil science; microbiology; viruses; neuroscience; animal migration""",
    "math": """arithmetic; fractions; percentages; ratios; linear equations; quadratic equations; inequalities;
        functions and graphs; exponents and logarithms; sequences and series; calculus; derivatives;
        integrals; limits; linear algebra; matrices; vectors; probability; dice and cards; statistics;
        mean median and mode; standard deviation; prime numbers; divisibility; modular arithmetic; geometry;
        triangles; circles; areas and volumes; trigonometry; combinatorics; graph theory; set theory; logic;
        number puzzles; interest rates; unit conversion; speed distance and time; age puzzles; work rate
        problems""",
    "coding": """Python lists and dictionaries; string manipulation; regular expressions; file handling;
        JSON parsing; recursion; sorting algorithms; binary search; linked lists; stacks and queues; hash
        tables; trees and tree traversal; graphs and BFS; dynamic programming; greedy algorithms; big O
        notation; object-oriented design; classes and inheritance; error handling; unit testing; debugging;
        version control with git; SQL queries; database indexes; REST APIs; HTTP; web development; HTML and
        CSS; JavaScript; TypeScript; React; Node.js; Rust ownership; C pointers; C++ templates; Java; Go
        concurrency; shell scripting; Linux commands; Docker containers; Kubernetes; cloud computing;
        caching; multithreading; async programming; memory management; compilers; operating systems;
        computer networks; cybersecurity; passwords and hashing; machine learning; neural networks; data
        cleaning with pandas; plotting data; command line tools; code review""",
    "humanities": """the Roman Empire; ancient Greece; ancient Egypt; the Maya; medieval Europe; the Renaissance;
        the Reformation; the French Revolution; the American Revolution; the industrial revolution; World War
        I; World War II; the Cold War; decolonization; the history of China; Japan's Meiji era; the Silk Road;
        the Ottoman Empire; the printing press; democracy; the rule of law; human rights; economics; supply and
        demand; inflation; stock markets; taxes; globalization; urbanization; philosophy of mind; ethics;
        utilitarianism; Stoicism; existentialism; Plato; Confucius; world religions; mythology; Greek myths;
        Norse myths; linguistics; the history of English; learning a language; Shakespeare; poetry; the novel;
        mystery novels; science fiction; fairy tales; film making; photography; painting; sculpture;
        architecture; classical music; jazz; rock music; opera; theater; museums; anthropology; sociology;
        psychology; memory and learning; education systems""",
    "business": """starting a small business; marketing; branding; social media marketing; sales; customer
        service; job interviews; writing a resume; cover letters; salary negotiation; remote work; team
        meetings; leadership; project management; public speaking; presentations; networking; personal
        finance; budgeting for students; saving for retirement; credit cards; investing basics; insurance;
        real estate; accounting; supply chains; e-commerce; startups and venture capital; product design;
        workplace conflict; productivity tools; writing professional emails""",
    "society": """renewable energy; solar panels; wind power; nuclear power; electric cars; recycling; plastic
        pollution; water purification; agriculture; food waste; city planning; public libraries; social media;
        online privacy; misinformation; artificial intelligence ethics; robotics; 3D printing; smartphones;
        the internet; space travel; tourism; travel in Japan; travel in Italy; travel in Brazil; travel in
        Kenya; hiking; camping; volunteering; sports; football; basketball; tennis; the Olympics; chess;
        video games; board games; esports; fashion; holidays around the world; immigration; elections""",
}
TOPICS = sorted({t.strip() for v in TOPICS_BY_CATEGORY.values() for t in v.replace("\n", " ").split(";")
                 if t.strip()})

PERSONAS = ["a student", "a teacher", "a software engineer", "a curious child's parent", "a small business owner",
            "a retired engineer", "a nurse", "a journalist", "a novelist", "a university professor",
            "a beginner programmer", "a travel blogger", "a lawyer", "a data scientist", "a high school student",
            "a chef", "a scientist", "a manager", "someone learning English", "a museum guide"]

STYLES = {
    "writing": [
        "Write a request that {who} might give an AI assistant to write something (an email, a blog post, a "
        "story, a poem or a speech) about {t}. Reply with only the request.",
        "Write a writing task about {t} with a specific format, length or tone. Reply with only the task.",
        "Write an instruction asking an AI to draft a short persuasive or informative text about {t}. "
        "Reply with only the instruction.",
    ],
    "roleplay": [
        "Write a role-play request in which {who} asks the assistant to act as a character related to {t}. "
        "Reply with only the request.",
        "Write a request that asks an AI to pretend to be a famous person or an expert and answer a question "
        "about {t}. Reply with only the request.",
    ],
    "reasoning": [
        "Write a logic or common-sense reasoning question involving {t}. Reply with only the question.",
        "Write a tricky question about {t} that requires careful step-by-step thinking. Reply with only the "
        "question.",
    ],
    "math": [
        "Write a short math word problem involving {t}. Reply with only the problem.",
        "Write a math question with numbers about {t} that has one correct answer. Reply with only the "
        "question.",
    ],
    "coding": [
        "Write a programming task about {t} for a Python developer. Reply with only the task.",
        "Write a question that {who} might ask about {t} in programming. Reply with only the question.",
        "Write a request to implement a small function related to {t}, stating its inputs and outputs. "
        "Reply with only the request.",
    ],
    "extraction": [
        "Write a short text about {t} that contains names, numbers and dates, then ask to extract them as a "
        "list. Reply with the text and the question.",
        "Write a request to summarize, classify or reformat some information about {t} into a table or JSON. "
        "Include the information. Reply with only the request.",
    ],
    "stem": [
        "Write a question that {who} might ask to understand a scientific or technical concept from {t}. "
        "Reply with only the question.",
        "Write a question that asks how something works in {t}. Reply with only the question.",
    ],
    "humanities": [
        "Write a question that {who} might ask about the history, culture or ideas of {t}. Reply with only "
        "the question.",
        "Write a discussion question comparing two viewpoints on {t}. Reply with only the question.",
    ],
    "general": [
        "Write one question that {who} might ask an AI assistant about {t}. Reply with only the question.",
        "Write a request for practical advice about {t}. Reply with only the request.",
        "Write a request for a step-by-step guide about {t}. Reply with only the request.",
    ],
}

TEMPLATES = [
    "Explain {t} in simple terms.", "What are the most important things to know about {t}?",
    "Write a short poem about {t}.", "Give me three tips related to {t}.",
    "Write a persuasive paragraph about why {t} matters.", "Describe {t} to a ten-year-old.",
    "What are common misconceptions about {t}?", "Write a short dialogue between two friends discussing {t}.",
    "Summarize the history of {t} in a few sentences.", "Create a quiz with three questions about {t}, with answers.",
    "List the pros and cons of {t}.", "Write a tweet about {t}.", "What would an expert say about {t}?",
    "Write a short story in which {t} plays a central role.", "Give me a study plan for learning about {t}.",
]

FOLLOWUPS = [
    "Can you make your answer shorter?", "Now explain it as if I were five years old.",
    "Rewrite your previous answer in a more formal tone.", "Give me a concrete example.",
    "Summarize your answer in one sentence.", "What are the counterarguments?",
    "Can you turn that into a bulleted list?", "Rewrite it as a short poem.", "Why is that the case?",
    "Add two more points to your answer.", "Now write it from the point of view of a skeptic.",
    "Can you explain the second point in more detail?", "Translate your main idea into simple English.",
    "Is there anything you would change in your answer?", "Give me a title for your answer.",
    "Now make it funny.", "Write a short email based on your answer.", "What should I do next?",
    "Could you check your answer for mistakes?", "Put your answer in a table.",
]

EXTRACTION_TASKS = [
    "Summarize the following text in three sentences.", "List the key terms defined in this text.",
    "Write two questions that this text answers, with their answers.", "Explain this text to a beginner.",
    "What is the main idea of the following passage?", "Extract every code keyword mentioned below as a list.",
    "Rewrite the following passage in plain language.", "Give a one-line title for the following text.",
]

CODE_TASKS = [
    "Write a Python function `{name}{sig}` that does the following: {s}.",
    "Implement `{name}` in plain Python (no libraries): {s}.",
    "Explain what this Python function does:\n```python\n{src}```",
    "Write unit tests for a Python function `{name}{sig}` that should: {s}.",
]

SKIP_MODULES = {"antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle", "ensurepip", "venv",
                "encodings", "lib2to3", "pydoc_data", "msilib", "winreg", "winsound", "msvcrt", "nt", "curses",
                "readline", "rlcompleter", "pdb", "cgitb", "webbrowser", "sys", "builtins", "xml.etree.cElementTree"}


def stdlib_modules() -> list[str]:
    """Public standard-library modules and their submodules, minus ones with import side effects."""
    import pkgutil
    import sys
    out = []
    for name in sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in SKIP_MODULES):
        out.append(name)
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001  (platform-specific or removed)
            continue
        for info in pkgutil.iter_modules(getattr(mod, "__path__", []) or [], name + "."):
            leaf = info.name.rsplit(".", 1)[1]
            if not leaf.startswith("_") and "test" not in leaf and info.name not in SKIP_MODULES:
                out.append(info.name)
    return out


PACKAGE_MODULES = """numpy.lib._function_base_impl numpy.lib._shape_base_impl numpy.lib._arraysetops_impl
    numpy.lib._nanfunctions_impl numpy.lib._polynomial_impl numpy.lib._twodim_base_impl numpy._core.numeric
    numpy._core.fromnumeric scipy.special._basic scipy.stats._stats_py scipy.optimize._optimize
    scipy.signal._signaltools scipy.interpolate._interpolate networkx.algorithms.shortest_paths.unweighted
    networkx.algorithms.shortest_paths.weighted networkx.algorithms.cycles networkx.algorithms.dag
    networkx.algorithms.cluster networkx.algorithms.components.connected networkx.algorithms.matching
    networkx.algorithms.traversal.depth_first_search networkx.algorithms.traversal.breadth_first_search
    networkx.algorithms.bipartite.basic networkx.generators.classic networkx.algorithms.tree.mst
    sympy.ntheory.factor_ sympy.ntheory.primetest sympy.ntheory.generate sympy.utilities.iterables
    sympy.combinatorics.permutations""".split()


def self_instruct_metas(rng: random.Random, per_pair: int) -> list[tuple[str, str]]:
    """(category, meta prompt) for every topic x style, per_pair times with random personas."""
    out = []
    for t in TOPICS:
        for cat, styles in STYLES.items():
            for s in styles:
                for _ in range(per_pair):
                    out.append((cat, s.format(t=t, who=rng.choice(PERSONAS))))
    rng.shuffle(out)
    return out


def clean_instruction(text: str) -> str | None:
    t = text.strip().strip('"').strip()
    for pre in ("Question:", "Instruction:", "Request:", "Task:", "Problem:", "Prompt:"):
        if t.startswith(pre):
            t = t[len(pre):].strip()
    if len(t) < 15 or len(t) > 900 or "Reply with only" in t:
        return None
    return t


def template_prompts() -> list[str]:
    return [tp.format(t=t) for t in TOPICS for tp in TEMPLATES]


def _members(mod):
    """(class name or None, function) for public functions and public methods defined in mod."""
    for fname, fn in inspect.getmembers(mod, inspect.isfunction):
        if not fname.startswith("_") and fn.__module__ == mod.__name__:
            yield None, fn
    for cname, cls in inspect.getmembers(mod, inspect.isclass):
        if cname.startswith("_") or cls.__module__ != mod.__name__:
            continue
        for fname, fn in vars(cls).items():
            if inspect.isfunction(fn) and not fname.startswith("_"):
                yield cname, fn


def _functions(modnames):
    for name in modnames:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001  (not installed, or a version without that module)
            continue
        for cname, fn in _members(mod):
            fname = fn.__name__
            doc = inspect.getdoc(fn) or ""
            try:
                sig = str(inspect.signature(fn))
                src = inspect.getsource(fn)
            except (TypeError, ValueError, OSError):
                continue
            if doc and len(sig) < 160:
                yield name, cname, fname, sig, doc, src


def _humaneval_shape(mod, cname, fname, sig, doc, rng):
    """imports + `def name(sig):` + indented docstring, the shape of a HumanEval prompt."""
    paras = doc.strip().split("\n\n")
    keep = paras[: rng.choice([1, 2, 3])]
    body = "\n\n".join(keep).strip()
    if len(body) > 900:
        body = body[:900].rsplit("\n", 1)[0]
    ind = "\n".join(("    " + ln) if ln.strip() else "" for ln in body.split("\n"))
    imports = []
    if "List[" in sig or "Optional[" in sig or "Dict[" in sig or "Tuple[" in sig:
        imports.append("from typing import List, Optional, Dict, Tuple")
    if rng.random() < 0.3:
        imports.append(f"import {mod.split('.')[0]}")
    head = ("\n".join(imports) + "\n\n\n") if imports else ""
    q = rng.choice(['"""', '"""', "'''"])
    if cname:  # a method: inside a class stub, one more indent
        ind = "\n".join(("    " + ln) if ln.strip() else "" for ln in ind.split("\n"))
        return f"{head}class {cname}:\n    ...\n\n    def {fname}{sig}:\n        {q} {ind.lstrip()}\n        {q}\n"
    return f"{head}def {fname}{sig}:\n    {q} {ind.lstrip()}\n    {q}\n"


def code_prompts(rng: random.Random) -> list[tuple[str, str]]:
    """('code-complete', HumanEval-shaped text) and ('code', request) prompts."""
    out = []
    for modnames in (stdlib_modules(), PACKAGE_MODULES):
        for mod, cname, fname, sig, doc, src in _functions(modnames):
            out.append(("code-complete", _humaneval_shape(mod, cname, fname, sig, doc, rng)))
            s = doc.strip().split("\n")[0].strip().rstrip(".")
            if not s:
                continue
            s = s[0].lower() + s[1:]
            task = rng.choice(CODE_TASKS)
            if "{src}" in task and len(src) > 1400:
                task = CODE_TASKS[0]
            out.append(("code", task.format(name=fname, sig=sig, s=s, src=src)))
    rng.shuffle(out)
    return out


def extraction_prompts(rng: random.Random, limit: int) -> list[str]:
    """Reading tasks over passages of the language reference text and stdlib module docstrings."""
    texts = []
    try:
        from pydoc_data.topics import topics
        texts += list(topics.values())
    except ImportError:
        pass
    for name in stdlib_modules():
        try:
            texts.append(inspect.getdoc(importlib.import_module(name)) or "")
        except Exception:  # noqa: BLE001
            continue
    passages = []
    for t in texts:
        cur = ""
        for para in re.split(r"\n\s*\n", t):
            para = para.strip()
            if not para:
                continue
            if len(cur) + len(para) > 1100:
                if len(cur) > 250:
                    passages.append(cur)
                cur = ""
            cur = (cur + "\n\n" + para).strip() if len(para) < 1100 else ""
        if len(cur) > 250:
            passages.append(cur)
    rng.shuffle(passages)
    return [f"{rng.choice(EXTRACTION_TASKS)}\n\n{p}" for p in passages[:limit]]


class Excluder:
    """Drops prompts that share an 8-word run with a held-out prompt, or name a HumanEval function."""

    def __init__(self, mtbench_path=None, humaneval_path=None, n=8):
        self.n, self.grams, self.names = n, set(), set()
        if mtbench_path:
            for line in open(mtbench_path):
                for turn in json.loads(line)["turns"]:
                    self.grams |= self._grams(turn)
        if humaneval_path:
            with gzip.open(humaneval_path, "rt") as f:
                for line in f:
                    d = json.loads(line)
                    self.grams |= self._grams(d["prompt"])
                    self.names.add(d["entry_point"])

    def _grams(self, text):
        w = re.findall(r"\w+", text.lower())
        return {" ".join(w[i:i + self.n]) for i in range(len(w) - self.n + 1)}

    def ok(self, text):
        if self.names and any(re.search(rf"\b{re.escape(n)}\s*\(|`{re.escape(n)}`", text) for n in self.names):
            return False
        return not (self._grams(text) & self.grams)
