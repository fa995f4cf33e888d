"""The grading test data, one table each: wrong answers, correct alternatives, boundaries covered.

WRONG: (exercise, answer cell, replacement source, the check that must fail FIRST).
ALTERNATIVES: (exercise, label, {answer cell: source}) — differently written right answers that must pass.
BOUNDARIES: per exercise, which boundary each check covers (the check names are the notebook's).
"""

from grading_helpers import solution_answer as sol


def _swap(name, answer, old, new):
    return sol(name, answer, old, new)


# --- which boundary each check covers ---------------------------------------------------------------
BOUNDARIES = {
    "ex01_naive_vs_cached": {
        "Part 1/naive counts, n=0 · cached counts, n=0": "length 0 (nothing runs)",
        "Part 1/… n=1": "length 1 (one pass, one row)",
        "Part 1/… n=255, 256, 1000": "long lengths, past the toy model's context (package counters)",
        "Part 2/… batch=1, prompt=1, n=1": "one new token: prefill only, no decode step",
        "Part 2/… batch=3, prompt=4, n=2": "one decode step, batch > 1",
        "Part 2/work, …": "each position computed once (an uncached decoder fails)",
        "Part 3/dot-product ratio, n=1, 2, 100, 1000, 12345": "a function, checked at n the text never "
                                                               "names: a typed-in 34.0 fails at n=1",
    },
    "ex02_kv_sizing": {
        "Part 1/… , bf16 · , fp8": "two value sizes (a hard-coded 2 bytes fails)",
        "Part 1/MLA bytes …": "MLA models (latent + RoPE key, no factor 2)",
        "Part 2/KV bytes, … at 1": "context of one token",
        "Part 2/KV bytes, Mistral-7B-v0.1 / Gemma-2-9B at 4095, 4096, 4097": "context below, at, above the window",
        "Part 2/KV bytes, … at 32768": "context far above the window",
        "Part 3/max sequences, Llama-3.1-70B …": "weights do not fit: 0, never negative",
        "Part 3/max sequences, memory for k sequence(s) -1/+0/+1 byte": "memory exactly k sequences, ±1 byte",
    },
    "ex03_online_softmax": {
        "Part 1/output, tiles of 12/4/1/5 columns": "one tile, even tiles, 1-column tiles, a ragged last tile",
        "Part 1/rescaled output": "a max that grows with every tile",
        "Part 1/large scores": "scores ~5000 (exp overflows without the running max)",
        "Part 1/fully masked tile": "a row masked in its first tile (no NaN)",
        "Part 1/row masked everywhere": "a row with no visible key (m=-inf, l=0, acc=0)",
        "Part 2/visited tiles, n_q=48/47/49, n_k=…, tile=16": "lengths at, below, above a multiple of the tile",
        "Part 2/visited tiles, n_q=1, …": "one query (decode)",
        "Part 2/visited tiles, n_q=12, n_k=12, tile=1": "tiles of one row (the diagonal tile exactly)",
        "Part 2/visited tiles, n_q=300, n_k=200, …": "more queries than keys (rows that see nothing)",
        "Part 3/your forward == package, 64x64 / 70x50 / 50x70": "exact multiple of the block, n_q > n_k, n_q < n_k",
    },
    "ex05a_prefix_caching": {
        "Part 1/…, P of 1 token(s)": "prompt of one token (partial block shared by every fork)",
        "Part 1/…, P of 31/32/33 token(s)": "prompt at k·block_size and ±1 (fork at a boundary: nothing to copy)",
        "Part 1/… completions of 1, 16, 17 tokens": "completions at a block boundary and ±1",
        "Part 1/prompt prefilled once, …": "shared (prompt) blocks computed once; token-by-token scoring allowed",
        "Part 2": "timing shown as information, never graded",
        "Part 3/hashes of 0, 1, 15, 16, 17, 47, 48, 49, 63 tokens": "lengths 0, 1, k·16 and ±1",
        "Part 3/hashes with 4-token blocks": "another block size",
        "Part 4/prompt of 64, 65, 63, 49, 48, 47, 17, 16, 1, 0 cached tokens": "k·16 and ±1: "
                                                                                 "the last token always computed",
    },
    "ex05b_paged_attention": {
        "Part 1/blocks, block size 16/7/1": "lengths 0, 1, k·bs−1, k·bs, k·bs+1 for three block sizes",
        "Part 2/…": "empty free list, shared block, double free, reuse after free",
        "Part 3/16 tokens fill one block · a new block only when the last is full": "exactly one block, then +1",
        "Part 3/the partial block was copied · references after copy-on-write": "copy-on-write of a shared block",
        "Part 3/no copy of an unshared block": "no copy of a block nobody else holds",
        "Part 3/fork at a block boundary: …": "fork at k·block_size: full blocks stay shared, nothing copied",
        "Part 4/… (one, 1 token) / (block, 16) / (block+1, 17)": "lengths 1, block_size, block_size+1",
        "Part 4/… (y, 53 tokens)": "a fork sharing a block (shared and unshared blocks)",
        "Part 4/…, large scores": "scores in the thousands (softmax overflow)",
        "Part 5/…": "1000 requests through the learner's free list",
    },
    "ex06_scheduler": {
        "Part 1/grows to exactly a block boundary: no preemption": "cached + n exactly k·BLOCK",
        "Part 1/one token past a block boundary: preempt the newest": "k·BLOCK + 1",
        "Part 1/the newest preempts itself": "the sequence that grows is the newest",
        "Part 1/two preemptions, the older one first in line": "several victims, queue order",
        "Part 2/prompt exactly the budget · … the remaining budget, with others · one token over …":
            "budget exactly, +1 (with and without others)",
        "Part 2/prompt exactly the free blocks · one token over …": "blocks exactly, +1 token",
        "Part 2/at most MAX_NUM_SEQS running": "the running-sequence limit",
        "Part 3/…": "the whole schedule, step by step, with and without preemption",
    },
    "ex07_acceptance": {
        "Part 1/greedy limit: …": "all accepted (bonus), reject after a match, reject at once",
        "Part 1/first token follows the target · acceptance rate": "k = 1, residual distribution",
        "Part 1/all drafts accepted when q = p · bonus token …": "p = q: every draft accepted, bonus from p_k",
        "Part 1/whole rounds follow the target chain": "k = 3 rounds end to end",
    },
}


# --- wrong answers: (exercise, answer, source, first failing check) ------------------------------------
E1, E2, E3, E5A, E5B, E6, E7 = ("ex01_naive_vs_cached", "ex02_kv_sizing", "ex03_online_softmax",
                                "ex05a_prefix_caching", "ex05b_paged_attention", "ex06_scheduler",
                                "ex07_acceptance")

NO_CACHE = '''
@torch.inference_mode()
def cached_greedy(model, prompt, new_tokens):
    tokens = prompt
    for _ in range(new_tokens):
        next_token = model(tokens)[:, -1].argmax(dim=-1, keepdim=True)   # recomputes the prefix
        tokens = torch.cat([tokens, next_token], dim=1)
    return tokens
'''

REENCODES = '''
def score_with_fork(model, prompt, completions):
    with torch.inference_mode():                   # no cache at all: P is encoded every time
        return [model(torch.tensor([prompt + c]))[0, len(prompt):] for c in completions]
'''

NO_FORK = '''
def score_with_fork(model, prompt, completions):
    cache = PagedKVCache.for_model(model.config, num_blocks=64, block_size=16)
    cache.blocks.add_sequence("P")
    out = []
    with torch.inference_mode():
        model(torch.tensor([prompt]), cache=cache.view("P"), pos=0)
        for c in completions:                      # every completion appended to the same sequence
            view = cache.view("P")
            out.append(model(torch.tensor([c]), cache=view, pos=view.length)[0])
    return out
'''

NOT_CHAINED = '''
def chained_block_hashes(tokens, block_size=16):
    return [hash_block(0, tokens[s:s + block_size])          # each block hashed on its own
            for s in range(0, len(tokens) - block_size + 1, block_size)]
'''

PARTIAL_BLOCK = '''
def chained_block_hashes(tokens, block_size=16):
    hashes, parent = [], 0
    for start in range(0, len(tokens), block_size):          # hashes the partial last block too
        parent = hash_block(parent, tokens[start:start + block_size])
        hashes.append(parent)
    return hashes
'''

ADMIT_SKIPS_BLOCKED = '''
def admit(state, budget, work):
    for s in list(state["waiting"]):                         # skips a sequence that does not fit
        if budget <= 0 or len(state["running"]) >= MAX_NUM_SEQS:
            break
        n = s["length"]
        if (n > budget and work) or blocks_for(n) > state["free"]:
            continue
        state["waiting"].remove(s)
        s["blocks"] = blocks_for(n)
        state["free"] -= s["blocks"]
        state["running"].append(s)
        work.append((s, n))
        budget -= n
    return budget
'''

WRONG = [
    # exercise 1.1
    (E1, "counts", _swap(E1, "counts", "return sum(range(1, n + 1))", "return n * (n - 1) // 2"),
     "Part 1/naive query rows, n=1"),
    (E1, "cached_decoder", _swap(E1, "cached_decoder", "cache=cache, pos=pos)", "cache=cache, pos=prompt.shape[1])"),
     "Part 2/tokens, batch=1, prompt=1, n=30"),
    (E1, "cached_decoder", NO_CACHE, "Part 2/work, batch=1, prompt=1, n=30"),
    (E1, "cached_decoder", _swap(E1, "cached_decoder", "for _ in range(new_tokens):", "for _ in range(new_tokens - 1):"),
     "Part 2/shape, batch=1, prompt=1, n=1"),
    (E1, "ratios", "def dot_ratio(n):\n    return 34.0    # typed in\n", "Part 3/dot-product ratio, n=1"),
    # exercise 2.1
    (E2, "per_layer", "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n"
                      "    return 2 * spec.head_dim * bytes_per_value\n", "Part 1/bytes per token per layer, Llama-2-7B, bf16"),
    (E2, "per_layer", _swap(E2, "per_layer", "return (spec.kv_lora_rank", "return 2 * (spec.kv_lora_rank"),
     "Part 1/MLA bytes per token per layer, DeepSeek-V2-Lite, bf16"),
    (E2, "per_layer", _swap(E2, "per_layer", "* bytes_per_value", "* 2").replace("(spec, 2)", "(spec, bytes_per_value)"),
     "Part 1/bytes per token per layer, Llama-2-7B, fp8"),
    (E2, "kv_bytes", _swap(E2, "kv_bytes", "min(w, ctx_tokens)", "ctx_tokens"), "Part 2/KV bytes, Mistral-7B-v0.1 at 4097, batch 1"),
    (E2, "kv_bytes", _swap(E2, "kv_bytes", "min(w, ctx_tokens)", "w"), "Part 2/KV bytes, Mistral-7B-v0.1 at 1, batch 1"),
    (E2, "kv_bytes", _swap(E2, "kv_bytes", "min(w, ctx_tokens)", "min(w - 1, ctx_tokens)"),
     "Part 2/KV bytes, Mistral-7B-v0.1 at 4096, batch 1"),
    (E2, "max_sequences", _swap(E2, "max_sequences", "left // my_kv_bytes", "(left - 1) // my_kv_bytes"),
     "Part 3/max sequences, memory for 1 sequence(s) +0 byte"),
    (E2, "max_sequences", _swap(E2, "max_sequences", "return max(0, left // my_kv_bytes(spec, ctx_tokens, 1, bytes_per_value))",
                                "return left // my_kv_bytes(spec, ctx_tokens, 1, bytes_per_value)"),
     "Part 3/max sequences, Llama-3.1-70B on H100 SXM at 4096"),
    (E2, "max_sequences", "def my_max_sequences(spec, gpu, ctx_tokens, bytes_per_value, reserve_fraction):\n    return 12\n",
     "Part 3/max sequences, Llama-3.1-8B on H100 SXM at 32768"),
    # exercise 3.1
    (E3, "online_update", _swap(E3, "online_update", "alpha[:, None] * acc + p @ v", "acc + p @ v"),
     "Part 1/output, tiles of 4 columns"),
    (E3, "online_update", _swap(E3, "online_update", "m_safe = np.where(np.isneginf(m_new), 0.0, m_new)", "m_safe = m_new"),
     "Part 1/fully masked tile"),
    (E3, "online_update", _swap(E3, "online_update", "alpha = np.exp(m - m_safe)", "alpha = np.exp(m) / np.exp(m_safe)"),
     "Part 1/large scores"),
    (E3, "tile_visible", _swap(E3, "tile_visible", "last_row + (n_k - n_q)", "last_row"),
     "Part 2/visited tiles, n_q=64, n_k=256, tile=32"),
    (E3, "tile_visible", _swap(E3, "tile_visible", "k_start <= last_row", "k_start < last_row"),
     "Part 2/visited tiles, n_q=64, n_k=81, tile=16"),
    # exercise 5.1
    (E5A, "fork", REENCODES, "Part 1/prompt prefilled once, P of 250 tokens"),
    (E5A, "fork", NO_FORK, "Part 1/forked logits equal re-encoding, P of 250 tokens"),
    (E5A, "hashes", NOT_CHAINED, "Part 3/hashes of 47 tokens"),
    (E5A, "hashes", PARTIAL_BLOCK, "Part 3/hashes of 1 token"),
    (E5A, "reuse", _swap(E5A, "reuse", "[:usable]", ""), "Part 4/prompt of 64 cached tokens"),
    (E5A, "reuse", _swap(E5A, "reuse", "(len(prompt) - 1) // block_size", "len(prompt) // block_size - 1"),
     "Part 4/prompt of 65 cached tokens"),
    (E5A, "reuse", "def reusable_tokens(prompt, cached, block_size=16):\n    return 48\n", "Part 4/stops at the first miss"),
    # exercise 5.2
    (E5B, "blocks_needed", "def blocks_needed(num_tokens, block_size=16):\n"
                           "    return num_tokens // block_size + (num_tokens > 0)\n", "Part 1/blocks, block size 16"),
    (E5B, "paged_cache", _swap(E5B, "paged_cache", "        for block in self.tables.pop(seq):\n            self.alloc.free(block)",
                               "        self.tables.pop(seq)"), "Part 3/blocks return to the free list on finish"),
    (E5B, "paged_cache", _swap(E5B, "paged_cache", "elif self.alloc.refs[table[-1]] > 1:", "elif False:"),
     "Part 3/the partial block was copied"),
    (E5B, "paged_cache", _swap(E5B, "paged_cache", "elif self.alloc.refs[table[-1]] > 1:", "elif self.alloc.refs[table[-1]] >= 1:"),
     "Part 3/no copy of an unshared block"),
    (E5B, "paged_cache", _swap(E5B, "paged_cache", "            self.alloc.free(table[-1])\n", ""),
     "Part 3/references after copy-on-write"),
    (E5B, "attend", _swap(E5B, "attend", "valid = min(bs, n - i * bs)", "valid = bs"),
     "Part 4/paged attention equals dense attention (one, 1 token)"),
    (E5B, "attend", _swap(E5B, "attend", "p = torch.exp(scores - m_new)", "p = torch.exp(scores) / math.exp(m_new)"),
     "Part 4/paged attention equals dense attention (one, 1 token, large scores)"),
    # exercise 6.1
    (E6, "make_room", _swap(E6, "make_room", 'state["running"].pop()', 'state["running"].pop(0)'),
     "Part 1/one token past a block boundary: preempt the newest"),
    (E6, "make_room", _swap(E6, "make_room", 'blocks_for(s["cached"] + n)', 'blocks_for(s["cached"] + n + 1)'),
     "Part 1/grows to exactly a block boundary: no preemption"),
    (E6, "admit", _swap(E6, "admit", '        if blocks_for(n) > state["free"]:\n            break\n', ""),
     "Part 2/prompt one token over the free blocks waits"),
    (E6, "admit", _swap(E6, "admit", "if n > budget and work:", "if n >= budget and work:"),
     "Part 2/prompt exactly the remaining budget, with others"),
    (E6, "admit", ADMIT_SKIPS_BLOCKED, "Part 2/first come, first served"),
    (E6, "admit", _swap(E6, "admit", "    while state", '    if state["running"]:\n        return budget\n    while state'),
     "Part 2/prompt exactly the remaining budget, with others"),
    # exercise 7.1
    (E7, "verify", _swap(E7, "verify", "            dist = (p[b, n] - q[b, n]).clamp_min(0)\n"
                                       "            dist = dist / dist.sum() if dist.sum() > 0 else p[b, n]\n",
                         "            dist = p[b, n]\n"), "Part 1/first token follows the target"),
    (E7, "verify", _swap(E7, "verify", "u[b, n] * q[b, n, draft[b, n]] < p[b, n, draft[b, n]]", "u[b, n] < p[b, n, draft[b, n]]"),
     "Part 1/first token follows the target"),
    (E7, "verify", _swap(E7, "verify", "            dist = p[b, k]\n",
                         "            dist = p[b, k - 1]\n"), "Part 1/greedy limit: next tokens"),
    (E7, "verify", _swap(E7, "verify", "        while n < k and u[b, n] * q[b, n, draft[b, n]] < p[b, n, draft[b, n]]:\n"
                                       "            n += 1\n",
                         "        n = sum(bool(u[b, i] * q[b, i, draft[b, i]] < p[b, i, draft[b, i]]) for i in range(k))\n"),
     "Part 1/greedy limit: accepted counts"),
]


# --- correct alternatives: (exercise, label, {answer: source}) ----------------------------------------
ALTERNATIVES = [
    (E1, "closed forms in floats, preallocated output, debug prints", {
        "counts": "def naive_rows(n):\n    return n * (n + 1) / 2\n\ndef naive_dots(n):\n    return n * (n + 1) * (n + 2) / 6\n\n"
                  "def cached_rows(n):\n    return float(n)\n\ndef cached_dots(n):\n    return n * (n + 1) / 2\n",
        "cached_decoder": '''
@torch.inference_mode()
def cached_greedy(model, prompt, new_tokens):
    batch, length = prompt.shape
    out = torch.empty(batch, length + new_tokens, dtype=prompt.dtype)
    out[:, :length] = prompt
    cache = KVCache.for_model(model.config, batch, length + new_tokens)
    logits = model(prompt, cache=cache, pos=0)
    for i in range(new_tokens):
        out[:, length + i] = logits[:, -1].argmax(dim=-1)
        print("step", i, out[:, length + i].tolist())
        if i + 1 < new_tokens:
            logits = model(out[:, length + i:length + i + 1], cache=cache, pos=length + i)
    return out
''',
        "ratios": "def dot_ratio(n):\n    return (n + 2) / 3\n",
    }),
    (E1, "loops, a list of tokens, one extra pass", {
        "counts": '''
def naive_rows(n):
    total = 0
    for step in range(1, n + 1):
        total += step
    return total

def naive_dots(n):
    total = 0
    for step in range(1, n + 1):
        total += step * (step + 1) // 2
    return total

def cached_rows(n):
    return len(range(n))

def cached_dots(n):
    return sum(p for p in range(1, n + 1))
''',
        "cached_decoder": '''
def cached_greedy(model, prompt, new_tokens):
    with torch.no_grad():
        cache = KVCache.for_model(model.config, prompt.shape[0], prompt.shape[1] + new_tokens)
        logits = model(prompt, cache=cache, pos=0)
        new = []
        for i in range(new_tokens):
            token = logits[:, -1:].argmax(dim=-1)
            new.append(token)
            if prompt.shape[1] + i < prompt.shape[1] + new_tokens - 1:
                logits = model(token, cache=cache, pos=prompt.shape[1] + i)
        return torch.cat([prompt] + new, dim=1)
''',
        "ratios": "def dot_ratio(n):\n    return float(naive_dots(n)) / float(cached_dots(n))\n",
    }),
    (E2, "floats and loops", {
        "per_layer": '''
def my_bytes_per_token_per_layer(spec, bytes_per_value):
    if spec.is_mla:
        values = spec.kv_lora_rank + spec.qk_rope_head_dim
    else:
        values = spec.num_key_value_heads * spec.head_dim * 2
    return float(values * bytes_per_value)
''',
        "kv_bytes": '''
def my_kv_bytes(spec, ctx_tokens, batch, bytes_per_value):
    total = 0.0
    for window in spec.layer_windows:
        kept = ctx_tokens if window is None or window >= ctx_tokens else window
        total += kept * my_bytes_per_token_per_layer(spec, bytes_per_value)
    print("KV bytes:", total * batch)
    return total * batch
''',
        "max_sequences": '''
import math

def my_max_sequences(spec, gpu, ctx_tokens, bytes_per_value, reserve_fraction):
    free = math.ceil(gpu.memory_bytes * (1 - reserve_fraction)) - spec.n_params * bytes_per_value
    if free <= 0:
        return 0
    return math.floor(free / my_kv_bytes(spec, ctx_tokens, 1, bytes_per_value))
''',
    }),
    (E2, "numpy, counting sequences one by one", {
        "per_layer": '''
def my_bytes_per_token_per_layer(spec, bytes_per_value):
    per_token = (spec.kv_lora_rank + spec.qk_rope_head_dim) if spec.is_mla else 2 * spec.num_key_value_heads * spec.head_dim
    return per_token * bytes_per_value
''',
        "kv_bytes": '''
import numpy as np

def my_kv_bytes(spec, ctx_tokens, batch, bytes_per_value):
    windows = np.array([ctx_tokens if w is None else w for w in spec.layer_windows])
    return int(np.minimum(windows, ctx_tokens).sum()) * batch * my_bytes_per_token_per_layer(spec, bytes_per_value)
''',
        "max_sequences": '''
import math

def my_max_sequences(spec, gpu, ctx_tokens, bytes_per_value, reserve_fraction):
    left = math.ceil(gpu.memory_bytes * (1 - reserve_fraction)) - spec.n_params * bytes_per_value
    one = my_kv_bytes(spec, ctx_tokens, 1, bytes_per_value)
    count = max(0, left) // one
    while (count + 1) * one <= left:
        count += 1
    return count
''',
    }),
    (E3, "a loop over rows, debug print", {
        "online_update": '''
import math

def attention_update(m, l, acc, s, v):
    m, l, acc = m.copy(), l.copy(), acc.copy()
    for r in range(s.shape[0]):
        new_max = max(m[r], s[r].max())
        if new_max == -math.inf:
            continue                              # nothing visible yet in this row
        scale = math.exp(m[r] - new_max)
        weights = np.exp(s[r] - new_max)
        l[r] = l[r] * scale + weights.sum()
        acc[r] = acc[r] * scale + weights @ v
        m[r] = new_max
    return m, l, acc
print("attention_update defined")
''',
        "tile_visible": '''
def tile_visible(q_start, q_end, k_start, n_q, n_k):
    return not (k_start > q_end - 1 + n_k - n_q)
''',
    }),
    (E3, "masks instead of where, any() over rows", {
        "online_update": '''
def attention_update(m, l, acc, s, v):
    m_new = np.max(np.concatenate([m[:, None], s], axis=1), axis=1)
    seen = np.isfinite(m_new)
    alpha = np.zeros_like(m)
    alpha[seen] = np.exp(m[seen] - m_new[seen])
    p = np.zeros_like(s)
    p[seen] = np.exp(s[seen] - m_new[seen, None])
    return m_new, l * alpha + p.sum(axis=1), acc * alpha[:, None] + p @ v
''',
        "tile_visible": '''
def tile_visible(q_start, q_end, k_start, n_q, n_k):
    return any(row + (n_k - n_q) >= k_start for row in range(q_start, q_end))
''',
    }),
    (E5A, "fork everything first, one pool, takewhile", {
        "fork": '''
def score_with_fork(model, prompt, completions):
    cache = PagedKVCache.for_model(model.config, num_blocks=512, block_size=16)
    cache.blocks.add_sequence("P")
    with torch.inference_mode():
        model(torch.tensor([prompt]), cache=cache.view("P"), pos=0)
        for i in range(len(completions)):
            cache.blocks.fork("P", f"c{i}")
        logits = [model(torch.tensor([c]), cache=cache.view(f"c{i}"), pos=len(prompt))[0]
                  for i, c in enumerate(completions)]
    for i in range(len(completions)):
        cache.blocks.free_sequence(f"c{i}")
    return logits
''',
        "hashes": '''
def chained_block_hashes(tokens, block_size=16):
    hashes = []
    while (len(hashes) + 1) * block_size <= len(tokens):
        start = len(hashes) * block_size
        hashes.append(hash_block(hashes[-1] if hashes else 0, tokens[start:start + block_size]))
    return hashes
''',
        "reuse": '''
from itertools import takewhile

def reusable_tokens(prompt, cached, block_size=16):
    hits = len(list(takewhile(lambda h: h in cached, chained_block_hashes(prompt, block_size))))
    return max(0, min(hits * block_size, ((len(prompt) - 1) // block_size) * block_size))
''',
    }),
    (E5A, "token by token (slow but correct), for-else", {
        "fork": '''
def score_with_fork(model, prompt, completions):
    cache = PagedKVCache.for_model(model.config, num_blocks=256, block_size=16)
    cache.blocks.add_sequence("P")
    out = []
    with torch.inference_mode():
        model(torch.tensor([prompt]), cache=cache.view("P"), pos=0)
        for i, c in enumerate(completions):
            cache.blocks.fork("P", i)
            rows = [model(torch.tensor([[t]]), cache=cache.view(i), pos=len(prompt) + j)[0, -1]
                    for j, t in enumerate(c)]
            out.append(torch.stack(rows))
            cache.blocks.free_sequence(i)
    return out
''',
        "hashes": '''
def chained_block_hashes(tokens, block_size=16):
    parent, out = 0, []
    for b in range(len(tokens) // block_size):
        parent = hash_block(parent, tokens[b * block_size:(b + 1) * block_size])
        out.append(parent)
    return out
''',
        "reuse": '''
def reusable_tokens(prompt, cached, block_size=16):
    hashes = chained_block_hashes(prompt, block_size)
    for i, h in enumerate(hashes):
        if h not in cached:
            n = i
            break
    else:
        n = len(hashes)
    if n * block_size >= len(prompt):
        n -= 1
    return max(n, 0) * block_size
''',
    }),
    (E5B, "math.ceil, deque and dict, vectorised attention", {
        "blocks_needed": "import math\n\ndef blocks_needed(num_tokens, block_size=16):\n    return math.ceil(num_tokens / block_size)\n",
        "free_list": '''
from collections import deque

class FreeList:
    def __init__(self, num_blocks):
        self.free_blocks = deque(range(num_blocks))
        self.refs = [0] * num_blocks

    @property
    def num_free_blocks(self):
        return len(self.free_blocks)

    def allocate(self):
        if len(self.free_blocks) == 0:
            raise RuntimeError("no free block")
        block = self.free_blocks.popleft()
        self.refs[block] = 1
        return block

    def incref(self, block):
        self.refs[block] = self.refs[block] + 1

    def free(self, block):
        if not self.refs[block]:
            raise ValueError("double free")
        self.refs[block] -= 1
        if not self.refs[block]:
            self.free_blocks.append(block)
''',
        "paged_cache": '''
class ToyPagedCache:
    def __init__(self, num_blocks, block_size=16, dim=4):
        self.alloc = FreeList(num_blocks)
        self.block_size = block_size
        self.k = torch.zeros(num_blocks, block_size, dim)
        self.v = torch.zeros(num_blocks, block_size, dim)
        self.tables, self.lengths = {}, {}

    def add(self, seq):
        self.tables[seq] = []
        self.lengths[seq] = 0

    def append(self, seq, k, v):
        block_index, offset = divmod(self.lengths[seq], self.block_size)
        table = self.tables[seq]
        if block_index == len(table):
            table.append(self.alloc.allocate())
        shared = table[block_index]
        if self.alloc.refs[shared] > 1:
            private = self.alloc.allocate()
            self.k[private].copy_(self.k[shared])
            self.v[private].copy_(self.v[shared])
            self.alloc.free(shared)
            table[block_index] = private
        self.k[table[block_index]][offset] = k
        self.v[table[block_index]][offset] = v
        self.lengths[seq] += 1

    def fork(self, parent, child):
        self.tables[child] = self.tables[parent][:]
        self.lengths[child] = self.lengths[parent]
        for b in self.tables[child]:
            self.alloc.incref(b)

    def finish(self, seq):
        while self.tables[seq]:
            self.alloc.free(self.tables[seq].pop())
        del self.tables[seq], self.lengths[seq]

    def read(self, seq):
        n = self.lengths[seq]
        ks = torch.cat([self.k[b] for b in self.tables[seq]]) if self.tables[seq] else self.k[:0, 0]
        vs = torch.cat([self.v[b] for b in self.tables[seq]]) if self.tables[seq] else self.v[:0, 0]
        return ks[:n], vs[:n]
''',
        "attend": '''
def paged_attend(q, cache, seq):
    table, n = cache.tables[seq], cache.lengths[seq]
    k = cache.k[table].reshape(-1, q.shape[0])[:n]
    v = cache.v[table].reshape(-1, q.shape[0])[:n]
    return torch.softmax(k @ q / q.shape[0] ** 0.5, dim=0) @ v
''',
        "report": '''
def memory_report(result):
    held, reserved = float(result.held), float(result.reserved)
    return dict(utilisation=held / result.capacity, waste=(reserved - held) / reserved,
                max_concurrent=int(result.max_concurrent))
''',
    }),
    (E5B, "integer arithmetic, a set of free blocks, log-sum-exp per block, debug print", {
        "blocks_needed": "def blocks_needed(num_tokens, block_size=16):\n    return (num_tokens + block_size - 1) // block_size\n",
        "free_list": '''
class FreeList:
    def __init__(self, num_blocks):
        self.available = set(range(num_blocks))
        self.refs = [0 for _ in range(num_blocks)]

    @property
    def num_free_blocks(self):
        return len(self.available)

    def allocate(self):
        try:
            block = min(self.available)
        except ValueError:
            raise RuntimeError("out of blocks") from None
        self.available.remove(block)
        self.refs[block] = 1
        return block

    def incref(self, block):
        self.refs[block] += 1

    def free(self, block):
        if block in self.available:
            raise ValueError(f"block {block} is free")
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.available.add(block)
''',
        "attend": '''
def paged_attend(q, cache, seq):
    n, bs, d = cache.lengths[seq], cache.block_size, q.shape[0]
    logsum, out = None, torch.zeros_like(q)
    for i, block in enumerate(cache.tables[seq]):
        rows = min(bs, n - i * bs)
        scores = cache.k[block, :rows] @ q / math.sqrt(d)
        block_lse = torch.logsumexp(scores, dim=0)
        block_out = torch.softmax(scores, dim=0) @ cache.v[block, :rows]
        if logsum is None:
            logsum, out = block_lse, block_out
        else:
            new = torch.logaddexp(logsum, block_lse)
            out = out * torch.exp(logsum - new) + block_out * torch.exp(block_lse - new)
            logsum = new
    return out
''',
    }),
    (E6, "indices and del, debug print", {
        "make_room": '''
def make_room(state, s, n):
    needed = blocks_for(s["cached"] + n) - s["blocks"]
    while needed > state["free"]:
        victim = state["running"][-1]
        del state["running"][-1]
        state["free"] = state["free"] + victim["blocks"]
        victim.update(blocks=0, cached=0)
        state["waiting"].insert(0, victim)
        if victim["id"] == s["id"]:
            return False
    return True
''',
        "admit": '''
def admit(state, budget, work):
    while True:
        if not state["waiting"] or budget <= 0 or len(state["running"]) >= MAX_NUM_SEQS:
            return budget
        head = state["waiting"][0]
        need = blocks_for(head["length"])
        too_long = head["length"] > budget and len(work) > 0
        if too_long or need > state["free"]:
            return budget
        state["waiting"].popleft()
        head["blocks"] = need
        state["free"] -= need
        state["running"].append(head)
        work.append((head, head["length"]))
        budget = budget - head["length"]
''',
    }),
    (E6, "recursion, a for-loop admission", {
        "make_room": '''
def make_room(state, s, n):
    if blocks_for(s["cached"] + n) - s["blocks"] <= state["free"]:
        return True
    victim = state["running"].pop()
    state["free"] += victim["blocks"]
    victim["blocks"] = victim["cached"] = 0
    state["waiting"].appendleft(victim)
    return victim is not s and make_room(state, s, n)
''',
        "admit": '''
def admit(state, budget, work):
    for _ in range(len(state["waiting"])):
        if budget <= 0 or len(state["running"]) >= MAX_NUM_SEQS:
            break
        s = state["waiting"][0]
        if (s["length"] > budget and work) or blocks_for(s["length"]) > state["free"]:
            break
        state["waiting"].popleft()
        s["blocks"] = blocks_for(s["length"])
        state["free"] -= s["blocks"]
        state["running"].append(s)
        work.append((s, s["length"]))
        budget -= s["length"]
    return budget
''',
    }),
    (E7, "vectorised acceptance, loop for sampling", {
        "verify": '''
def my_verify(p, q, draft, generator):
    batch, k = draft.shape
    u = torch.rand(batch, k, generator=generator, dtype=p.dtype)
    p_x = p[:, :k].gather(2, draft[:, :, None])[:, :, 0]
    q_x = q.gather(2, draft[:, :, None])[:, :, 0]
    accept = u * q_x < p_x
    n_accepted = accept.long().cumprod(dim=1).sum(dim=1)
    next_token = torch.empty(batch, dtype=torch.long)
    for b in range(batch):
        n = int(n_accepted[b])
        if n == k:
            dist = p[b, k]
        else:
            dist = torch.clamp(p[b, n] - q[b, n], min=0)
            dist = dist / dist.sum() if dist.sum() > 0 else p[b, n]
        next_token[b] = torch.multinomial(dist, 1, generator=generator)
    return n_accepted, next_token
''',
    }),
    (E7, "one random number at a time, min(1, p/q)", {
        "verify": '''
def my_verify(p, q, draft, generator):
    batch, k = draft.shape
    n_accepted, next_token = [], []
    for b in range(batch):
        n = 0
        for i in range(k):
            x = int(draft[b, i])
            ratio = min(1.0, float(p[b, i, x]) / float(q[b, i, x]))
            if torch.rand(1, generator=generator, dtype=torch.float64).item() < ratio:
                n += 1
            else:
                break
        if n < k:
            residual = torch.maximum(p[b, n] - q[b, n], torch.zeros_like(p[b, n]))
            dist = residual / residual.sum() if residual.sum() > 0 else p[b, n]
        else:
            dist = p[b, k]
        n_accepted.append(n)
        next_token.append(int(torch.multinomial(dist, 1, generator=generator)))
    return torch.tensor(n_accepted), torch.tensor(next_token)
''',
    }),
]


# --- notebook-level cases: (exercise, label, edit, expected, text) ----------------------------------------
# `edit(nb)` changes the notebook dict in place, after the answers are filled from the solution;
# `expected` is the first failing check (the text in CHECK FAILED [...]) or "pass"; `text`: words the
# failure message (or, for "pass", the report) must contain. Tampered, deleted and weakened checks,
# redefined helpers, tags on checks, package-calling answers, copied tables, %%time, timeouts, errors
# in added cells, SyntaxErrors and answers of the wrong type. Cases labelled "timeout: ..." are graded
# with a short time limit per cell (--grading-timeout).
def _cell(nb, cid):
    return next(c for c in nb["cells"] if c.get("id") == cid)


def answer(cid, source):
    def edit(nb):
        _cell(nb, cid)["source"] = source
    return edit


def check_cell(cid, old, new):
    def edit(nb):
        c = _cell(nb, cid)
        text = "".join(c["source"])
        assert old in text, f"{cid} no longer contains {old!r}"
        c["source"] = text.replace(old, new)
    return edit


def delete(cid):
    def edit(nb):
        nb["cells"].remove(_cell(nb, cid))
    return edit


def add_after(cid, source, tags=()):
    def edit(nb):
        i = nb["cells"].index(_cell(nb, cid))
        nb["cells"].insert(i + 1, {"cell_type": "code", "id": f"mine{i}", "metadata": {"tags": list(tags)},
                                   "outputs": [], "execution_count": None, "source": source})
    return edit


def tag(cid, *tags):
    def edit(nb):
        _cell(nb, cid).setdefault("metadata", {}).setdefault("tags", []).extend(tags)
    return edit


def prefix(cid, text):
    def edit(nb):
        c = _cell(nb, cid)
        c["source"] = text + "".join(c["source"])
    return edit


def move(cid, before):
    def edit(nb):
        c = _cell(nb, cid)
        nb["cells"].remove(c)
        nb["cells"].insert(nb["cells"].index(_cell(nb, before)), c)
    return edit


def both(*edits):
    def edit(nb):
        for e in edits:
            e(nb)
    return edit


HIDDEN_TEXT = "its expected value is not shown"
E2_WRONG = "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n    return 2 * spec.head_dim * bytes_per_value\n"
E2_FIRST = "Part 1/bytes per token per layer, Llama-2-7B, bf16"

NOTEBOOK_CASES: list = [
    # checks are the book's, whatever the notebook says
    (E2, "weakened check", both(answer("per_layer", E2_WRONG), check_cell("c06", "check_equal(", "abs(1e9) > 1 or check_equal(")),
     E2_FIRST, "differ from the book's (c06 edited)"),
    (E2, "deleted check", both(answer("per_layer", E2_WRONG), delete("c06")), E2_FIRST, "differ from the book's (c06 deleted)"),
    (E2, "check replaced by pass", both(answer("per_layer", E2_WRONG),
                                        check_cell("c06", "    for mla in", "    pass\n    for mla in ()")), E2_FIRST,
     "it was graded with the book's checks"),
    (E2, "checks reordered", both(answer("per_layer", E2_WRONG), move("c14", "c06")), E2_FIRST, ""),
    (E2, "raises-exception tag and NBVAL_SKIP on a check", both(answer("per_layer", E2_WRONG), tag("c06", "raises-exception", "nbval-skip"),
                                                                prefix("c06", "# NBVAL_SKIP\n")), E2_FIRST, "differ from the book's"),
    (E2, "check helper redefined in the answer cell", answer("per_layer", E2_WRONG + "\ncheck_equal = lambda *a, **k: None\n"
                                                              "part = __import__('contextlib').nullcontext\n"), E2_FIRST, ""),
    (E2, "check helpers redefined in an added cell", both(answer("per_layer", E2_WRONG), add_after(
        "per_layer", "def check_equal(*args, **kwargs):\n    pass\n\ndef part(*args, **kwargs):\n"
                     "    return __import__('contextlib').nullcontext()\n")), E2_FIRST, ""),
    (E2, "grading module monkeypatched", answer("per_layer", E2_WRONG + "\nimport inferbook.grading\n"
                                                "inferbook.grading.first_difference = lambda *a, **k: None\n"),
     "Part 1/checks untouched", "inferbook.grading.first_difference"),
    (E2, "builtins monkeypatched", answer("per_layer", E2_WRONG + "\nimport builtins\nbuiltins.isinstance = lambda *a: True\n"),
     "Part 1/checks untouched", "builtins.isinstance"),
    (E2, "package patched during the check", answer("per_layer", "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n"
                                                    "    import inferbook.sizing as s\n"
                                                    "    s.kv_bytes_per_token_per_layer = lambda *a, **k: 512\n"
                                                    "    return 512\n"), E2_FIRST, ""),
    # the student's own work
    (E2, "package-calling answer", answer("per_layer", "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n"
                                                       "    dtype = {1: 'fp8', 2: 'bf16', 4: 'fp32'}[bytes_per_value]\n"
                                                       "    return kv_bytes_per_token_per_layer(spec, dtype)\n"),
     "Part 1/your own code", "kv_bytes_per_token_per_layer"),
    (E2, "package call caught, own fallback", answer("kv_bytes", "def my_kv_bytes(spec, ctx_tokens, batch, bytes_per_value):\n"
                                                                 "    try:\n        return kv_bytes(spec, ctx_tokens, batch, 'bf16')\n"
                                                                 "    except Exception:\n        return 0\n"),
     "Part 2/your own code", "write it yourself"),
    # copied tables, answers right only for the shown example
    (E2, "weights sized for bf16 only", answer("max_sequences", sol(E2, "max_sequences", "spec.n_params * bytes_per_value",
                                                                   "spec.n_params * 2")),
     "Part 3/max sequences, hidden value size and memory", HIDDEN_TEXT),
    # one grader: %%time, SyntaxError, errors in added cells, types, timeouts
    (E2, "%%time on an answer cell", prefix("per_layer", "%%time\n"), "pass", "3 of 3 parts pass"),
    (E2, "SyntaxError in an answer", answer("kv_bytes", sol(E2, "kv_bytes", "return batch", "return batch +")),
     "Part 2/answer cell runs", "SyntaxError on line 7"),
    (E2, "error in an added cell", add_after("per_layer", "x = 1\nprint(undefined_name)\n"), "Part 1/your added cell",
     "a cell you added (after cell per_layer) raised NameError"),
    (E2, "answer of the wrong type", answer("per_layer", "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n"
                                            "    return str(2 * spec.num_key_value_heads * spec.head_dim * bytes_per_value)\n"),
     E2_FIRST, "expected a number (an int or a float), got a str"),
    (E2, "timeout: endless loop in an answer", answer("kv_bytes", "def my_kv_bytes(spec, ctx_tokens, batch, bytes_per_value):\n"
                                                                  "    while True:\n        pass\n"),
     "Part 2/time limit", "Part 2 timed out after"),
    # per exercise: package calls and copied tables
    (E1, "package-calling decoder", answer("cached_decoder", "def cached_greedy(model, prompt, new_tokens):\n"
                                                             "    from inferbook.decode import generate_cached\n"
                                                             "    return generate_cached(model, prompt, new_tokens).tokens\n"),
     "Part 2/your own code", "inferbook.decode.generate_cached"),
    (E1, "package-calling counts", answer("counts", sol(E1, "counts", "return sum(range(1, n + 1))",
                                                        "return naive_counts(1, n)[0] if n else 0")),
     "Part 1/your own code", "inferbook.decode.naive_counts"),
    (E1, "ratio table copied from messages", answer("ratios", "def dot_ratio(n):\n    return {1: 1.0, 2: 4 / 3, 100: 34.0, 1000: 334.0,"
                                                               " 12345: 4115.666666666667}.get(n, 1.0)\n"),
     "Part 3/dot-product ratio, hidden n", HIDDEN_TEXT),
    (E1, "%%time on the decoder", prefix("cached_decoder", "%%time\n"), "pass", "3 of 3 parts pass"),
    (E3, "numpy monkeypatched", answer("online_update", sol(E3, "online_update", "alpha[:, None] * acc + p @ v", "acc + p @ v")
                                       + "\nnp.isclose = lambda a, b, **k: np.ones(np.shape(a), dtype=bool)\n"),
     "Part 1/checks untouched", "numpy.isclose"),
    (E3, "tile answer right only for the shown cases", answer("tile_visible", sol(E3, "tile_visible", "return k_start",
                                                                                   "return n_q in (1, 12, 47, 48, 49, 64, 100, 200, 256, 300) and k_start")),
     "Part 2/visited tiles, hidden lengths", HIDDEN_TEXT),
    (E5A, "package-calling hashes", answer("hashes", "def chained_block_hashes(tokens, block_size=16):\n"
                                                     "    return block_hashes(tokens, block_size)\n"),
     "Part 3/your own code", "inferbook.prefix_cache.block_hashes"),
    (E5A, "reuse table copied from messages", answer("reuse", "def reusable_tokens(prompt, cached, block_size=16):\n"
                                                              "    if not cached:\n        return 0\n"
                                                              "    table = {64: 48, 65: 64, 63: 48, 49: 48, 48: 32, 47: 32, 17: 16, 16: 0, 1: 0, 0: 0, 68: 16, 78: 48}\n"
                                                              "    return table.get(len(prompt), 0)\n"),
     "Part 4/prompt of hidden length, hidden block size", HIDDEN_TEXT),
    (E5B, "package ceil_div", answer("blocks_needed", "from inferbook.arith import ceil_div\n\n"
                                                      "def blocks_needed(num_tokens, block_size=16):\n    return ceil_div(num_tokens, block_size)\n"),
     "Part 1/your own code", "inferbook.arith.ceil_div"),
    (E5B, "package-calling paged attention", answer("attend", "def paged_attend(q, cache, seq):\n    return paged_attention(q.view(1, 1, -1), "
                                                              "cache.k.unsqueeze(2), cache.v.unsqueeze(2), cache.tables[seq], "
                                                              "cache.lengths[seq])[0, 0]\n"),
     "Part 4/your own code", "inferbook.paged.paged_attention"),
    (E5B, "attention of the wrong type", answer("attend", "def paged_attend(q, cache, seq):\n    return 'the output'\n"),
     "Part 4/paged attention equals dense attention (one, 1 token)", "expected an array or tensor of numbers of shape (4,)"),
    (E6, "deleted admission checks", both(answer("admit", ADMIT_SKIPS_BLOCKED), delete("c10")),
     "Part 2/first come, first served", "differ from the book's"),
    (E7, "package-calling verify", answer("verify", "def my_verify(p, q, draft, generator):\n"
                                                    "    from inferbook.speculative import verify\n"
                                                    "    return verify(p, q, draft, generator)\n"),
     "Part 1/your own code", "inferbook.speculative.verify"),
]


# --- the exercises' own case files: tests/grading_cases_exNN*.py ---------------------------------------
# Each may define WRONG, ALTERNATIVES (lists, same rows as above), BOUNDARIES (a dict {exercise: {...}})
# and NOTEBOOK_CASES; they are merged into the tables above, so the tests grade every exercise alike.
def _merge_exercise_case_files() -> None:
    import importlib.util
    from pathlib import Path

    for path in sorted(Path(__file__).resolve().parent.glob("grading_cases_ex*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        WRONG.extend(getattr(module, "WRONG", []))
        ALTERNATIVES.extend(getattr(module, "ALTERNATIVES", []))
        NOTEBOOK_CASES.extend(getattr(module, "NOTEBOOK_CASES", []))
        for name, table in getattr(module, "BOUNDARIES", {}).items():
            BOUNDARIES.setdefault(name, {}).update(table)


_merge_exercise_case_files()
