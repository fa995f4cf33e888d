"""Run `vllm serve` on the CPU and sweep `vllm bench serve` request rates against it.

    .venv-vllm/bin/python tools/vllm_ref/serve_sweep.py --out DIR [--rates 1,2,4] [--repeats 3]
        [--num-prompts 40] [--input-len 128] [--output-len 32] [--range-ratio 0] [--port 18300]
        [--nice -15] [--goodput ttft:60,tpot:12]
    .venv-vllm/bin/python tools/vllm_ref/serve_sweep.py IN.json OUT.json   (tests/vllm_ref.py)

Builds a random-weight GPT-2-shaped model (`save_pretrained`, seeded) with an offline word-level
tokenizer beside it (nothing is downloaded), starts `vllm serve` on 127.0.0.1 (one engine thread,
`--block-size 32 --enforce-eager --dtype float32`, prefix caching off: the random prompts share
nothing and the simulator is not told their token ids), waits for /health, then runs
`vllm bench serve --dataset-name random --save-result --save-detailed` in this process once per
(repeat, rate) (with `--goodput`, vLLM's `--goodput` SLO in milliseconds too, so each saved
result carries its `request_goodput`), repeats outermost so that load drift reaches every rate
alike. Seeds: repeat k uses `--seed k` (its own Poisson arrival trace and prompts).

Writes DIR/rate<r>_rep<k>.json (vLLM's own saved result: per-request start times, TTFTs, ITLs,
latencies and its summary figures) and DIR/sweep.json (the configuration, the server's printed
KV cache size, wall time per point). Every failure the caller can fix (no vLLM, a busy port, a
server that does not start) ends in one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL = dict(vocab_size=2048, n_layer=4, n_embd=256, n_head=4, n_positions=1024)
SERVER = dict(max_num_seqs=16, max_num_batched_tokens=512, block_size=32, kv_cache_space_gib=1)


class SweepError(Exception):
    """A failure the caller can fix; `__main__` prints it as one line and exits with status 2."""


def fail(message: str) -> None:
    raise SweepError(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the saved results")
    p.add_argument("--rates", default="1,2,4", help="comma-separated request rates (req/s)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--num-prompts", type=int, default=40)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--range-ratio", type=float, default=0.0,
                   help="vLLM's --random-range-ratio: lengths uniform in [len·(1−r), len·(1+r)]")
    p.add_argument("--port", type=int, default=18300)
    p.add_argument("--start-timeout", type=float, default=600.0, help="seconds to wait for /health")
    p.add_argument("--nice", type=int, default=0,
                   help="scheduling priority (nice value) of the server's and the client's "
                        "sessions, e.g. -15 on a machine shared with other work (root, below 0)")
    p.add_argument("--goodput", default="",
                   help="an SLO for vLLM's --goodput, comma-separated KEY:MS pairs with KEY one of "
                        "ttft, tpot, e2el (e.g. ttft:60,tpot:12)")
    a = p.parse_args(argv)
    try:
        a.rates = [float(r) for r in a.rates.split(",") if r.strip()]
    except ValueError:
        fail(f"--rates must be comma-separated numbers, got {a.rates!r}")
    if not a.rates or any(not (r > 0 and r < float("inf")) for r in a.rates):
        fail(f"--rates must hold finite positive request rates, got {a.rates}")
    for name in ("repeats", "num_prompts", "input_len", "output_len"):
        if getattr(a, name) < 1:
            fail(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(a, name)}")
    if not 0 <= a.range_ratio < 1:
        fail(f"--range-ratio must be in [0, 1), got {a.range_ratio}")
    if (a.input_len + a.output_len) * (1 + a.range_ratio) > MODEL["n_positions"]:
        fail(f"--input-len + --output-len must be ≤ {MODEL['n_positions']} (the model's context)")
    a.goodput = parse_goodput(a.goodput)
    if not 1024 <= a.port <= 65535:
        fail(f"--port must be in 1024..65535, got {a.port}")
    return a


def parse_goodput(text: str) -> dict[str, float]:
    """Return `--goodput`'s "ttft:60,tpot:12" as {"ttft": 60.0, "tpot": 12.0} (milliseconds)."""
    slo: dict[str, float] = {}
    for pair in (x.strip() for x in text.split(",") if x.strip()):
        key, _, value = pair.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = float("nan")
        if key not in ("ttft", "tpot", "e2el") or not (ms > 0 and ms < float("inf")):
            fail(f"--goodput must be KEY:MS pairs with KEY in ttft, tpot, e2el and MS > 0, "
                 f"got {pair!r}")
        slo[key] = ms
    return slo


def set_priority(pid: int, nice: int) -> bool:
    """Give process `pid` and its session the priority `nice`: the process's own nice value and,
    where the kernel groups sessions (autogroup, the default on desktops and on this machine),
    the session group's, without which a nice value only ranks processes within one session.
    Return whether both were set; warn (one line) otherwise."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        group = Path(f"/proc/{pid}/autogroup")
        if group.exists():
            group.write_text(str(nice))
        return True
    except OSError as e:
        print(f"serve_sweep: could not set priority {nice} on pid {pid} ({e}); running at the "
              "default", file=sys.stderr)
        return False


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def build_model(folder: Path) -> None:
    """Save a seeded random-weight GPT-2 and a word-level tokenizer (token i is the word "w<i>")."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    cfg = GPT2Config(**MODEL, bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, MODEL["vocab_size"])}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces: decode/encode round-trips
    special = "<|endoftext|>"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=special, bos_token=special, unk_token=special,
                            model_max_length=MODEL["n_positions"]).save_pretrained(folder)


def start_server(model: Path, port: int, log: Path, timeout: float,
                 nice: int = 0) -> tuple[subprocess.Popen, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               VLLM_CPU_KVCACHE_SPACE=str(SERVER["kv_cache_space_gib"]))
    cmd = [sys.executable, str(HERE / "shim.py"), "serve", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--block-size", str(SERVER["block_size"]), "--enforce-eager",
           "--dtype", "float32", "--max-num-seqs", str(SERVER["max_num_seqs"]),
           "--max-num-batched-tokens", str(SERVER["max_num_batched_tokens"]),
           "--no-enable-prefix-caching", "--seed", "0", "--max-model-len", str(MODEL["n_positions"])]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    if nice:  # its own session: its own scheduling group, given the same priority
        set_priority(proc.pid, nice)
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
            fail(f"vllm serve exited with status {proc.returncode} before it was ready; last line "
                 f"of {log}: {tail[0][:300]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, time.perf_counter() - start
        except OSError:
            pass
        time.sleep(2)
    stop_server(proc)
    fail(f"vllm serve did not answer http://127.0.0.1:{port}/health within {timeout:g} s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def bench_point(model: Path, port: int, rate: float, seed: int, a, out: Path, name: str) -> float:
    """Run one `vllm bench serve` point in this process; return its wall seconds."""
    import contextlib
    import io

    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--model", str(model),
        "--dataset-name", "random", "--random-input-len", str(a.input_len),
        "--random-output-len", str(a.output_len), "--random-range-ratio", f"{a.range_ratio:g}",
        "--num-prompts", str(a.num_prompts), "--request-rate", f"{rate:g}", "--seed", str(seed),
        "--ignore-eos", "--temperature", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        *(["--goodput", *(f"{k}:{v:g}" for k, v in a.goodput.items())] if a.goodput else []),
        "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", name])
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        main(args)
    return time.perf_counter() - start


def kv_cache_tokens(log: Path) -> int | None:
    m = re.search(r"CPU KV cache size: ([\d,]+) tokens", log.read_text())
    return int(m.group(1).replace(",", "")) if m else None


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    import shim
    try:
        shim.require_vllm()
    except SystemExit as e:
        fail(str(e.code))
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        fail(f"vLLM does not import in {sys.executable} ({e}); run `make vllm` and use .venv-vllm/bin/python")
    if not port_is_free(a.port):
        fail(f"port {a.port} on 127.0.0.1 is in use; pass another --port")
    niced, before = 0, own_priority()
    if a.nice:
        niced = a.nice if set_priority(os.getpid(), a.nice) else 0
    try:
        return sweep_points(a, niced)
    finally:
        if niced:  # the session group outlives this process: give it its priority back
            set_priority(os.getpid(), before)


def own_priority() -> int:
    group = Path("/proc/self/autogroup")
    try:
        return int(group.read_text().split("nice")[1]) if group.exists() else os.getpriority(os.PRIO_PROCESS, 0)
    except (OSError, ValueError, IndexError):
        return 0


def sweep_points(a, niced: int) -> dict:
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = out / "model"
    t0 = time.perf_counter()
    build_model(model)
    proc, startup_s = start_server(model, a.port, out / "server.log", a.start_timeout, niced)
    points = []
    try:
        for rep in range(a.repeats):
            for rate in a.rates:
                name = f"rate{rate:g}_rep{rep}.json"
                wall = bench_point(model, a.port, rate, rep, a, out, name)
                points.append(dict(rate=rate, repeat=rep, seed=rep, file=name, wall_s=wall))
                print(f"rate {rate:g}/s repeat {rep}: {wall:.1f} s", flush=True)
                if proc.poll() is not None:
                    fail(f"vllm serve died during the sweep (status {proc.returncode}); see {out / 'server.log'}")
    finally:
        stop_server(proc)
    import shim as _s
    sweep = dict(model=MODEL, server=SERVER, prefix_caching=False, chunked_prefill=True,
                 num_prompts=a.num_prompts, input_len=a.input_len, output_len=a.output_len,
                 range_ratio=a.range_ratio, goodput_slo_ms=a.goodput,
                 rates=a.rates, repeats=a.repeats, vllm=_s.vllm_version(),
                 kv_cache_tokens=kv_cache_tokens(out / "server.log"), server_startup_s=startup_s,
                 total_wall_s=time.perf_counter() - t0, points=points,
                 env=dict(OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind"),
                 nice=niced, load_average=os.getloadavg())
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2))
    print(f"wrote {out / 'sweep.json'} ({sweep['total_wall_s']:.0f} s)")
    return sweep


def payload_main(given: Path, answer: Path) -> None:
    """`tests/vllm_ref.py`'s convention: options in IN.json, the sweep and every point's saved
    vLLM result in OUT.json. Options: out, rates (a list), repeats, num_prompts, input_len,
    output_len, range_ratio, port, nice, goodput (a dict of milliseconds, or "ttft:60,...")."""
    try:
        opts = json.loads(given.read_text())
    except (OSError, ValueError) as e:
        fail(f"cannot read the options {given}: {e}")
    if not isinstance(opts, dict) or "out" not in opts:
        fail(f"{given} must hold a JSON object with at least 'out'")
    argv = []
    for key, value in opts.items():
        if key == "rates":
            value = ",".join(f"{r:g}" for r in value)
        if key == "goodput" and isinstance(value, dict):
            value = ",".join(f"{k}:{v:g}" for k, v in value.items())
        argv += [f"--{key.replace('_', '-')}", str(value)]
    sweep = main(argv)
    out = Path(opts["out"]).resolve()
    sweep["results"] = {p["file"]: json.loads((out / p["file"]).read_text()) for p in sweep["points"]}
    answer.write_text(json.dumps(sweep))


if __name__ == "__main__":
    status = 0
    try:
        if len(sys.argv) == 3 and all(x.endswith(".json") for x in sys.argv[1:]):
            payload_main(Path(sys.argv[1]), Path(sys.argv[2]))
        else:
            main()
    except SweepError as e:
        print(f"serve_sweep: {e}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:
        print("serve_sweep: interrupted", file=sys.stderr)
        status = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip vLLM's extensions' exit-time leak reports (nanobind)
