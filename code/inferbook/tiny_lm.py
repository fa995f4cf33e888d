"""Two tiny character-level GPTs (a target and a draft) trained on text that ships with Python.

The serving chapters need a model whose outputs mean something (so a draft can agree with it)
yet runs in milliseconds on a CPU. Both models are `gpt.GPT`s over a fixed 96-character
vocabulary (newline + printable ASCII), trained ahead of time by this module's `main()` on the
source of a few pure-Python standard-library modules, and committed as float16 weights under
`outputs/tiny_lm/` (about 0.4 MB). Retrain with

    .venv/bin/python -m inferbook.tiny_lm            # a few minutes on 2 CPU cores

Why ahead of time and not in the notebook: two chapters and the benchmark share the pair, and
training the target to a useful loss takes minutes, beyond a chapter's 60-second budget.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import validate
from .gpt import GPT, GPTConfig

VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))  # 96 characters
_INDEX = {ch: i for i, ch in enumerate(VOCAB)}
UNKNOWN = _INDEX["?"]

# Pure-Python modules present in every CPython 3.10+ (their source is the corpus).
CORPUS_MODULES = ("textwrap", "string", "fnmatch", "glob", "shlex", "difflib", "heapq", "bisect",
                  "functools", "contextlib", "dataclasses", "enum", "argparse", "calendar")

TARGET_CONFIG = GPTConfig(vocab_size=len(VOCAB), n_positions=128, n_embd=64, n_layer=4, n_head=4)
DRAFT_CONFIG = GPTConfig(vocab_size=len(VOCAB), n_positions=128, n_embd=32, n_layer=1, n_head=2)


# Prompts for the chapters and the benchmark: written for this book (so they do not change with
# the Python version, unlike the training corpus), in the style of the corpus.
PROMPT_TEXT = '''\
class Request:
    """A request waiting for its reply."""

    def __init__(self, name, prompt, max_tokens=16):
        self.name = name
        self.prompt = prompt
        self.max_tokens = max_tokens

    def __repr__(self):
        return "%s(%r, %r)" % (self.__class__.__name__, self.name, self.prompt)


def split_lines(text, width=70):
    """Return the lines of text, each at most width characters long."""
    lines = []
    for line in text.splitlines():
        while len(line) > width:
            lines.append(line[:width])
            line = line[width:]
        lines.append(line)
    return lines


def count_words(path):
    counts = {}
    with open(path) as f:
        for line in f:
            for word in line.split():
                counts[word] = counts.get(word, 0) + 1
    return counts


if __name__ == "__main__":
    import sys
    for name in sys.argv[1:]:
        print(name, len(count_words(name)))
'''


def prompt_windows(n: int, length: int, seed: int = 0) -> list[list[int]]:
    """Return `n` token windows of `length` characters cut from `PROMPT_TEXT` at seeded offsets."""
    tokens = encode(PROMPT_TEXT)
    n = validate.integer("n", n, 0, 10**6)
    length = validate.integer("length", length, 1, len(tokens))
    seed = validate.integer("seed", seed)
    rng = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - length + 1, (n,), generator=rng).tolist()
    return [tokens[s:s + length] for s in starts]


def encode(text: str) -> list[int]:
    """Return token ids of `text`; characters outside the vocabulary become '?'."""
    if not isinstance(text, str):
        raise validate.ArgumentTypeError(f"text must be a str, got {type(text).__name__}")
    return [_INDEX.get(ch, UNKNOWN) for ch in text.replace("\t", "    ")]


def decode(ids) -> str:
    """Return the text of token ids (a list or a 1-D tensor)."""
    ids = validate.token_ids("ids", ids, len(VOCAB))
    return "".join(VOCAB[i] for i in ids)


def corpus_text() -> str:
    """Return the training text: the source of `CORPUS_MODULES`, concatenated."""
    parts = []
    for name in CORPUS_MODULES:
        module = importlib.import_module(name)
        parts.append(Path(module.__file__).read_text(encoding="utf-8"))
    return "\n\n".join(parts)


def weights_dir() -> Path:
    """Return outputs/tiny_lm of the book's repository: found from the package's own folder when
    it is installed editable (make), else from the working directory (an installed copy on Colab,
    where the notebooks run from the clone's notebooks/ folder)."""
    from .notebook import repo_root

    try:
        root = repo_root(Path(__file__).parent)
    except FileNotFoundError:
        root = repo_root()
    return root / "outputs" / "tiny_lm"


def load(name: str, dtype: torch.dtype = torch.float32) -> GPT:
    """Return the trained model `name` ("target" or "draft") in eval mode."""
    if name not in ("target", "draft"):
        raise ValueError(f"name must be 'target' or 'draft', got {name!r}")
    validate.torch_dtype("dtype", dtype)
    blob = torch.load(weights_dir() / f"{name}.pt", map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**blob["config"]))
    model.load_state_dict({k: v.to(torch.float32) for k, v in blob["state_dict"].items()})
    return model.to(dtype).eval()


def train(config: GPTConfig, tokens: torch.Tensor, steps: int, batch: int, seq_len: int,
          lr: float = 3e-3, seed: int = 0, log_every: int = 100) -> tuple[GPT, list[float]]:
    """Return a model trained by AdamW (cosine schedule) on random windows of `tokens`, and its losses."""
    validate.instance_of("config", config, GPTConfig)
    steps = validate.integer("steps", steps, 1, 10**7)
    batch = validate.integer("batch", batch, 1, 2**16)
    seq_len = validate.integer("seq_len", seq_len, 1, config.n_positions)
    tokens = validate.token_tensor("tokens", tokens, config.vocab_size, dims=1)
    if len(tokens) < seq_len + 2:
        raise ValueError(f"tokens must hold at least seq_len + 2 = {seq_len + 2} tokens, got {len(tokens)}")
    lr = validate.finite_float("lr", lr)
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    seed = validate.integer("seed", seed, 0, 2**63 - 1)
    log_every = validate.non_negative_int("log_every", log_every)
    torch.manual_seed(seed)
    model = GPT(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        for group in opt.param_groups:  # warm-up, then cosine decay to 10%
            warm = min(1.0, (step + 1) / 50)
            group["lr"] = lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        starts = torch.randint(0, len(tokens) - seq_len - 1, (batch,))
        x = torch.stack([tokens[s:s + seq_len] for s in starts])
        y = torch.stack([tokens[s + 1:s + seq_len + 1] for s in starts])
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"  step {step:5d}  loss {loss.item():.3f}  ({time.perf_counter() - start:.0f} s)", flush=True)
    return model.eval(), losses


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the tiny target and draft models.")
    ap.add_argument("--target-steps", type=int, default=2000)
    ap.add_argument("--draft-steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--only", choices=["target", "draft"], default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    for flag, value, high in (("--target-steps", args.target_steps, 10**7),
                              ("--draft-steps", args.draft_steps, 10**7), ("--batch", args.batch, 2**16)):
        if not 1 <= value <= high:
            ap.error(f"{flag} must be in [1, {high}], got {value}")
    torch.set_num_threads(1)  # small matrices: one thread is as fast and does not fight for cores
    text = corpus_text()
    tokens = torch.tensor(encode(text))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    out = Path(args.out) if args.out else weights_dir()
    out.mkdir(parents=True, exist_ok=True)
    print(f"corpus: {len(tokens)} characters from {len(CORPUS_MODULES)} stdlib modules (sha256 {digest})")
    for name, config, steps in (("draft", DRAFT_CONFIG, args.draft_steps),
                                ("target", TARGET_CONFIG, args.target_steps)):
        if args.only not in (None, name):
            continue
        print(f"training {name}: {config}")
        model, losses = train(config, tokens, steps, args.batch, config.n_positions)
        blob = {
            "config": config.__dict__,
            "state_dict": {k: v.to(torch.float16) for k, v in model.state_dict().items()},
            "final_loss": sum(losses[-50:]) / len(losses[-50:]),
            "steps": steps, "batch": args.batch, "corpus_sha256": digest,
            "corpus_modules": list(CORPUS_MODULES), "torch": str(torch.__version__),
        }
        torch.save(blob, out / f"{name}.pt")
        print(f"saved {out / (name + '.pt')}  final loss {blob['final_loss']:.3f}")


if __name__ == "__main__":
    main()
