"""Adapters in their own process (`specverify.isolation`): same answers as in-process, and hangs,
crashes, stray output, mutated inputs and ^C handled."""

import gc
import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from specverify.adapters.reference import ReferenceEngine
from specverify.audit import Context
from specverify.reference.tree_batch import TreeCoins
from specverify.battery import harness
from specverify.battery.problems import Problem
from specverify.errors import AdapterError, InputError
from specverify import isolation
from specverify.adapters import protocol
from specverify.isolation import open_adapter, plain_handle
from specverify.isolation.arena import Arena
from specverify.isolation.factories import factory_ref, resolve_ref
from specverify.isolation.pages import WrittenPages
from specverify.isolation.worker import Server
from specverify.reference.batch import Coins
from specverify.reference.chain import verify_batch
from specverify.reference.rules import RULES
from specverify.reference.toy import ToyModel
from specverify.reference.transforms import Transform

PLUGINS = Path(__file__).parent / "plugins" / "misbehaving.py"
REPO = Path(__file__).resolve().parent.parent


def as_from_a_terminal():
    """In the child before exec: SIGINT at its default and no signal blocked, as a shell started from a
    terminal leaves them (a child inherits both, and Python turns SIGINT into KeyboardInterrupt only
    when it starts with the default disposition)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def plugin(name: str) -> str:
    return f"{PLUGINS}:{name}"


def reference_factory():
    """A module-level factory: sent to the worker by module and name."""
    return ReferenceEngine()


def one_by_one(adapter, batch, coins):
    """A compound call run in the worker: the per-request verify_tree loop."""
    out = np.full((batch.batch_size, batch.depth + 1), -1, np.int64)
    for b in range(batch.batch_size):
        tree, target, draft = batch.request(b)
        res = adapter.verify_tree(tree, target, draft, coins.accept[b], float(coins.final[b]))
        tok = np.asarray(res[0] if isinstance(res, tuple) else res).reshape(-1)
        out[b, :tok.size] = tok
    return out


def problem(seed=0, vocab=8, kappa=4, deterministic=False):
    rng = np.random.default_rng(seed)
    return Problem("p", rng.dirichlet(np.full(vocab, 0.7), kappa + 1), rng.dirichlet(np.full(vocab, 0.7), kappa),
                   deterministic=deterministic)


def chain_call(m=2048, seed=1, greedy=False):
    p = problem()
    rng = np.random.default_rng(seed)
    batch = harness.replicate(p, p.sample_drafts(m, rng), greedy)
    return batch, Coins(rng.random(m * p.kappa), rng.random(m))


def tree_call(m=512, seed=2):
    rng = np.random.default_rng(seed)
    batch = harness.tree_batch(problem(kappa=2), (2, 2), m, rng)
    return batch, TreeCoins.random(batch, rng)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.fixture(scope="module")
def reference():
    with open_adapter("reference", timeout=60) as handle:
        yield handle


# ------------------------------------------------------------------------------ same answers

def test_attributes_are_mirrored(reference):
    assert reference.isolated and reference.name == "reference"
    assert reference.version == ReferenceEngine.version
    assert reference.capabilities == ReferenceEngine.capabilities
    assert reference.methods == {"verify", "verify_block", "verify_trees", "verify_tree", "verify_seeded", "generate"}
    assert hasattr(reference, "verify_trees") and not hasattr(reference, "decode_greedy")
    assert not hasattr(reference, "audit_defaults") and not hasattr(reference, "row_dtype")
    with open_adapter(plugin("counter"), timeout=30) as h:
        assert h.version == "2" and h.audit_defaults == {"samples": 1000}
        assert h.row_dtype == "float32" and h.models == "toy"


def test_results_equal_in_process_bit_for_bit(reference):
    local = ReferenceEngine()
    with open_adapter("reference", timeout=60, isolated=False) as inproc:
        for method in ("verify", "verify_block"):
            batch, coins = chain_call()
            want = getattr(local, method)(batch, coins)
            assert np.array_equal(reference.call(method, batch, coins), want)
            assert np.array_equal(getattr(reference, method)(batch, coins), want)       # the mirrored method
            assert np.array_equal(inproc.call(method, batch, coins), want)
            assert reference.last_mutated == [] and inproc.last_mutated == []
        batch, coins = chain_call(greedy=True)
        assert np.array_equal(reference.verify(batch, coins), local.verify(batch, coins))
        batch, coins = tree_call()
        want = local.verify_trees(batch, coins)
        assert np.array_equal(reference.verify_trees(batch, coins), want)
        assert np.array_equal(inproc.verify_trees(batch, coins), want)
        small, small_coins = tree_call(m=20)
        want = one_by_one(local, small, small_coins)
        assert np.array_equal(reference.run(one_by_one, small, small_coins), want)
        assert np.array_equal(inproc.run(one_by_one, small, small_coins), want)
        tree, target, draft = small.request(0)
        got = reference.verify_tree(tree, target, draft, small_coins.accept[0], 0.5)
        want = local.verify_tree(tree, target, draft, small_coins.accept[0], 0.5)
        assert len(got) == len(want) and all(np.array_equal(x, y) for x, y in zip(got, want))

        batch, _ = chain_call()
        seeds = np.arange(batch.batch_size, dtype=np.int64) + 7
        a, b, c = reference.fresh(), inproc.fresh(), ReferenceEngine()
        for _ in range(2):                           # the second call continues each seed's generator
            want = c.verify_seeded(batch, seeds)
            assert np.array_equal(a.verify_seeded(batch, seeds), want)
            assert np.array_equal(b.verify_seeded(batch, seeds), want)

        target = ToyModel(4, 3)
        kw = dict(target=target, draft=target.draft(5), prompt=(1,), kappa=2, transform=Transform(0.8, 0, 0.9),
                  seed=11, n=300, length=4)
        want = local.generate(**kw)
        for got in (reference.generate(**kw), inproc.generate(**kw)):
            assert np.array_equal(got[0], want[0]) and got[1] == want[1]


def test_battery_sized_batch(reference):
    batch, coins = chain_call(m=harness.CHUNK)
    assert np.array_equal(reference.verify(batch, coins), ReferenceEngine().verify(batch, coins))


def test_factory_by_callable_and_class():
    batch, coins = chain_call(m=64)
    want = ReferenceEngine().verify(batch, coins)
    with open_adapter(reference_factory, timeout=60) as h:             # imported by the worker as test_isolation
        assert np.array_equal(h.verify(batch, coins), want)
        f = h.fresh()
        assert np.array_equal(f.verify(batch, coins), want)
    ref = factory_ref(ReferenceEngine)
    assert ref[:3] == ("ref", "specverify.adapters.reference", "ReferenceEngine")
    assert resolve_ref(ref) is ReferenceEngine
    with pytest.raises(AdapterError, match='"pkg.module:factory"'):
        open_adapter(lambda: ReferenceEngine(), timeout=10)
    with pytest.raises(AdapterError, match="instance"):
        open_adapter(ReferenceEngine(), timeout=10)
    with open_adapter(ReferenceEngine(), timeout=10, isolated=False) as h:       # an instance, in-process
        assert np.array_equal(h.verify(batch, coins), want)
        with pytest.raises(AdapterError, match="no factory"):
            h.fresh()


def test_fresh_adapters_do_not_share_state():
    with open_adapter(plugin("counter"), timeout=30) as h:
        assert [h.call("count"), h.call("count")] == [1, 2]
        f = h.fresh()
        assert f.pid == h.pid
        assert [f.call("count"), h.call("count"), f.call("count")] == [1, 3, 2]
        f.close()
        with pytest.raises(AdapterError, match="closed"):
            f.call("count")
        assert h.call("count") == 4


# ---------------------------------------------------------------------------- errors

def test_gil_hog_is_killed_at_the_timeout():
    batch, coins = chain_call(m=64)
    with open_adapter(plugin("gil_hog"), timeout=30) as h:
        h.timeout = 1.0
        t0 = time.monotonic()
        with pytest.raises(AdapterError) as err:
            h.call("verify", batch, coins, what="misbehaving.verify (chain.marginal)")
        assert time.monotonic() - t0 < h.timeout + 2
        assert str(err.value) == "misbehaving.verify (chain.marginal): no answer within 1 s; the adapter process was killed"
        assert not alive(h.pid)
        with pytest.raises(AdapterError, match="the adapter process is gone .*killed after no answer"):
            h.verify(batch, coins)
        with pytest.raises(AdapterError, match="gone"):
            h.fresh()


@pytest.mark.parametrize("factory, how", [("exits", "exited with status 3"), ("segfault", "died of SIGSEGV")])
def test_worker_death_is_named(factory, how):
    batch, coins = chain_call(m=64)
    with open_adapter(plugin(factory), timeout=30) as h:
        with pytest.raises(AdapterError) as err:
            h.call("verify", batch, coins, what="misbehaving.verify (chain.joint)")
    first, *rest = str(err.value).splitlines()
    assert first == f"misbehaving.verify (chain.joint): the adapter process {how}"
    tail = "\n".join(rest)
    assert "last output of the adapter process" in tail
    assert ("about to exit" if factory == "exits" else "in verify") in tail     # faulthandler names the frame


def test_adapter_exceptions(capfd):
    batch, coins = chain_call(m=64)
    for isolated in (True, False):
        with open_adapter(plugin("raises"), timeout=30, isolated=isolated) as h:
            with pytest.raises(AdapterError) as err:
                h.verify(batch, coins)
            assert str(err.value) == "misbehaving.verify: raised ValueError: bad rows"
            with pytest.raises(AdapterError) as err:
                h.call("verify_block", batch, coins, what="ignored")
            assert str(err.value) == "misbehaving: my own message"
            with pytest.raises(AdapterError, match="raised ValueError"):     # still there to answer
                h.verify(batch, coins)
            if isolated:
                with pytest.raises(AdapterError, match="cannot be sent to the adapter process"):
                    h.run(lambda adapter: None)
                with pytest.raises(AdapterError, match="raised ValueError"):
                    h.verify(batch, coins)
    with pytest.raises(AdapterError) as err:
        open_adapter(plugin("broken_factory"), timeout=30)
    assert "broken_factory() raised KeyError" in str(err.value)
    with pytest.raises(InputError, match="unknown engine"):
        open_adapter("no-such-engine", timeout=30)
    assert "factory output" not in capfd.readouterr().out


def test_output_is_captured(capfd):
    batch, coins = chain_call(m=64)
    with open_adapter(plugin("chatty"), timeout=30) as h:
        assert np.array_equal(h.verify(batch, coins), verify_batch(batch, coins))
        out, err = capfd.readouterr()
        assert "chatty" not in out and "chatty" not in err
        with pytest.raises(AdapterError) as exc:
            h.call("die", what="chatty.die")
    text = str(exc.value)
    assert text.startswith("chatty.die: the adapter process exited with status 1")
    for line in ("chatty: built", "chatty: fd 1", "chatty: fd 2", "chatty: last words"):
        assert line in text
    assert "chatty" not in capfd.readouterr().out


@pytest.mark.parametrize("isolated", [True, False])
def test_mutated_inputs_are_named(isolated):
    batch, coins = chain_call(m=256)
    keep = batch.target_probs.copy()
    with open_adapter(plugin("mutating"), timeout=30, isolated=isolated) as h:
        out = h.verify(batch, coins)
        assert h.last_mutated == ["batch.target_probs"]
        assert np.array_equal(batch.target_probs, keep)                 # the audit's copy is intact
        assert np.array_equal(out, verify_batch(batch, coins))
        other, other_coins = chain_call(m=256, seed=5)                 # the next call sees its own rows
        assert np.array_equal(h.verify(other, other_coins), verify_batch(other, other_coins))
        assert h.last_mutated == ["batch.target_probs"]                # every call checked afresh


class _Plain:
    """A plain adapter object (no handle) whose verify sleeps, raises or answers."""
    name, capabilities = "plain", {"chain"}

    def __init__(self, how):
        self.how = how

    def verify(self, batch, coins):
        if self.how == "hangs":
            time.sleep(5)
        if self.how == "raises":
            raise ValueError("bad\nsecond line")
        return verify_batch(batch, coins)


def test_a_plain_adapter_is_called_through_a_pooled_plain_handle():
    """The harness reaches an adapter object given without a handle through `plain_handle`: the shared
    timed thread, inputs not copied, the same messages as an in-process handle; one handle per adapter."""
    batch, coins = chain_call(m=64)
    ctx = Context(timeout=1.0)
    adapter = _Plain("answers")
    assert np.array_equal(harness.invoke(adapter, "verify", batch, coins, ctx=ctx, what="plain.verify"),
                          verify_batch(batch, coins))
    h = plain_handle(adapter, timeout=1.0)
    assert h is plain_handle(adapter, timeout=2.0) and h.timeout == 2.0 and h.local is adapter and not h.isolated
    assert h.last_mutated == [] and h.factory_ref is None
    with pytest.raises(AdapterError, match=r"^plain.verify: raised ValueError: bad$"):
        harness.invoke(_Plain("raises"), "verify", batch, coins, ctx=ctx, what="plain.verify")
    with pytest.raises(AdapterError, match=r"plain.verify: no answer within 1 s \(hung\?\)"):
        harness.invoke(_Plain("hangs"), "verify", batch, coins, ctx=ctx, what="plain.verify")
    assert harness.call_with_timeout(lambda x: x + 1, 1, timeout=1.0, what="f") == 2     # a new thread after the hang


def test_the_protocol_table_is_the_one_vocabulary():
    """The handle's methods and parameters, and the capability contract, come from adapters.protocol.PROTOCOL;
    a verify rule's capability is provided by the method the harness calls for it."""
    assert isolation.METHODS == tuple(m.name for m in protocol.PROTOCOL)
    assert isolation.PARAMS == {m.name: m.params for m in protocol.PROTOCOL}
    assert protocol.METHODS == {"chain": ("verify",), "greedy": ("verify",), "block": ("verify_block",),
                                "tree": ("verify_trees", "verify_tree"), "seeded": ("verify_seeded",),
                                "engine": ("generate",), "bitwise": ("decode_greedy",), "serving": ("complete",)}
    assert protocol.REQUIRED == {"bitwise": ("bitwise_info",)}
    for rule in RULES.values():
        if rule.capability is not None:
            assert rule.method in protocol.METHODS[rule.capability]


def test_written_pages_are_found():
    """The worker's way to find written arguments: private pages of the argument arena."""
    written = WrittenPages.probe()
    if written is None:
        pytest.skip("no /proc/self/pagemap here: the audit compares the arguments itself")
    page = mmap.PAGESIZE
    arena = Arena(16 * page, private=True)
    shared = Arena(16 * page, fd=os.dup(arena.fd))          # the audit's side of the same file
    shared.bytes[:] = 7
    layout = [(None, 0, (2 * page,), np.uint8, "a"), (None, 2 * page + 64, (100,), np.float64, "b"),
              (None, 5 * page, (3,), np.int64, "c")]
    server = object.__new__(Server)
    server.arena, server.written, server.pins = arena, written, {}
    assert server.mutated(layout, restore=True) == []
    arena.bytes[2 * page + 64 + 8:2 * page + 64 + 16] = 0              # b[1] = 0.0
    arena.bytes[5 * page] = 7                                           # c written, unchanged
    assert server.mutated(layout, restore=True) == ["b"]
    assert (arena.bytes[:6 * page] == 7).all()                          # restored to the audit's bytes
    shared.bytes[:] = 3
    assert (arena.bytes[:6 * page] == 3).all() and server.mutated(layout, restore=True) == []


def test_the_pagemap_scan_finds_what_reading_the_pagemap_finds():
    """PAGEMAP_SCAN (one ioctl, only matching regions) and reading every entry agree, across the
    ioctl's region limit too."""
    written = WrittenPages.probe()
    if written is None or written.ioctl is None:
        pytest.skip("no PAGEMAP_SCAN here (Linux < 6.7): the pagemap is read entry by entry")
    page = mmap.PAGESIZE
    arena = Arena(4096 * page, private=True)
    arena.close_fd()
    arena.bytes[::page].sum()                                   # every page present, none written
    assert written.scanned(arena.address, arena.size).size == 0
    touched = [3, 4, 5, 900] + list(range(1000, 1000 + 2 * 700, 2))  # 703 regions: more than one ioctl
    for k in touched:
        arena.bytes[k * page + 7] = 1
    for start, size in ((0, arena.size), (page + 100, 950 * page)):
        got = written.scanned(arena.address + start, size)
        assert np.array_equal(got, written.read(arena.address + start, size))
    assert written.scanned(arena.address, arena.size).tolist() == touched


def rows_in(buf, m: int, seed: int, scale: float = 1.0):
    """A chain call whose rows lie in `buf` (a handle's shared buffer or a plain array), written there."""
    p = problem()
    k, v = p.kappa, p.vocab_size
    target, draft = buf[:m * (k + 1) * v].reshape(m, k + 1, v), buf[m * (k + 1) * v:m * (2 * k + 1) * v].reshape(m, k, v)
    target[:] = p.target * scale + (1 - scale) / v          # scale < 1: other rows, still distributions
    draft[:] = p.draft
    rng = np.random.default_rng(seed)
    batch = harness.trusted_batch(p.sample_drafts(m, rng).reshape(-1), np.full(m, k), target.reshape(-1, v),
                                  draft.reshape(-1, v))
    return batch, Coins(rng.random(m * k), rng.random(m))


def test_shared_buffers_cross_without_a_copy():
    """Rows in a handle's buffer reach the adapter as they are: the argument arena never holds them."""
    if WrittenPages.probe() is None:
        pytest.skip("no /proc/self/pagemap here: shared buffers are plain arrays, copied per call")
    with open_adapter("reference", timeout=30) as h:
        buf = h.buffer(4 << 20)                               # 32 MiB
        assert len(h.backend.pins) == 1
        for seed in range(3):
            batch, coins = rows_in(buf, 32768, seed, scale=1.0 - 0.1 * seed)
            assert np.array_equal(h.verify(batch, coins), verify_batch(batch, coins))    # each call sees its rows
            assert h.last_mutated == []
        arena = h.backend.arena                              # only the small arrays were copied
        assert arena is not None and arena.size < batch.target_probs.nbytes       # 4 MiB vs 10 MiB of rows
        del buf, batch, coins
        gc.collect()
        assert h.backend.pins == {} and h.backend.unpinned == [1]     # the worker hears of it next call
        small, small_coins = chain_call(m=16)
        h.verify(small, small_coins)
        assert h.backend.unpinned == []


def test_shared_buffers_are_plain_arrays_in_process():
    with open_adapter("reference", timeout=30, isolated=False) as h:
        buf = h.buffer((3, 5), np.int32)
        assert type(buf) is np.ndarray and buf.base is None and buf.shape == (3, 5) and buf.dtype == np.int32


@pytest.mark.parametrize("isolated", [True, False])
def test_inputs_changed_in_a_shared_buffer_are_found(isolated):
    with open_adapter(plugin("mutating"), timeout=30, isolated=isolated) as h:
        buf = h.buffer(1 << 20)
        for seed in range(2):
            batch, coins = rows_in(buf, 2048, seed)
            keep = batch.target_probs.copy()
            assert np.array_equal(h.verify(batch, coins), verify_batch(batch, coins))
            assert h.last_mutated == ["batch.target_probs"]
            assert np.array_equal(batch.target_probs, keep)          # the audit's rows are intact


def test_kept_inputs_in_a_shared_buffer_are_not_overwritten():
    """An adapter that keeps a batch sees it as it was, though the audit rewrites the buffer under it."""
    with open_adapter(plugin("retaining"), timeout=30) as h:
        buf = h.buffer(1 << 20)
        for seed in range(3):                    # the adapter raises if a batch it kept changed
            batch, coins = rows_in(buf, 2048, seed, scale=1.0 - 0.2 * seed)
            assert np.array_equal(h.verify(batch, coins), verify_batch(batch, coins))


def test_kept_inputs_are_not_overwritten():
    with open_adapter(plugin("retaining"), timeout=30) as h:
        for seed in range(3):                    # the adapter raises if a batch it kept changed
            batch, coins = chain_call(m=128, seed=seed)
            assert np.array_equal(h.verify(batch, coins), verify_batch(batch, coins))


def test_callbacks_run_in_the_audit():
    seen = []
    with open_adapter(plugin("progress"), timeout=30) as h:
        assert "decode_greedy" in h.methods
        assert h.decode_greedy("cpu", progress=seen.append) == ("label", None, {"steps": 3})
    assert seen == ["cpu step 0", "cpu step 1", "cpu step 2"]


# ------------------------------------------------------------------------------ ^C and death

AUDIT_LOOP = """
import sys, numpy as np
sys.path.insert(0, {tests!r})
from test_isolation import chain_call, plugin
from specverify.isolation import open_adapter
try:
    with open_adapter({spec!r}, timeout=60) as h:
        batch, coins = chain_call(m=4096)
        print(h.pid, flush=True)
        while True:
            h.verify(batch, coins)
except KeyboardInterrupt:
    sys.exit(130)
"""


def start_loop(tmp_path, spec):
    script = tmp_path / "loop.py"
    script.write_text(AUDIT_LOOP.format(tests=str(Path(__file__).parent), spec=spec))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    pid = int(proc.stdout.readline())
    time.sleep(0.5)                             # well inside the loop (or the hang)
    return proc, pid


@pytest.mark.parametrize("spec", ["reference", plugin("gil_hog")])
def test_sigint_ends_everything(tmp_path, spec):
    proc, child = start_loop(tmp_path, spec)
    os.killpg(proc.pid, signal.SIGINT)           # what a terminal's ^C does
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - t0 < 20      # the loop runs until killed: this shows ^C ended it (generous under load)
    assert proc.returncode == 130, err
    assert err == ""                             # no traceback from anyone
    assert not alive(child)


@pytest.mark.parametrize("spec", [plugin("gil_hog"), plugin("gil_holder")])
def test_worker_exits_when_the_audit_is_killed(tmp_path, spec):
    # gil_holder: one C call that never lets a Python thread run (the worker's lifeline thread cannot)
    proc, child = start_loop(tmp_path, spec)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 3
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphan = alive(child)
    if orphan:
        os.killpg(child, signal.SIGKILL)        # never leave the orphan running after a failure
    assert not orphan


def test_an_in_process_handle_of_a_registered_name_can_be_rebuilt_elsewhere():
    """An engine opened by name in this process keeps its name as its factory reference, so the rank
    processes (`specverify.ranks`) can build it: without it, `--in-process` audits (and the zoo's)
    skipped rank_agreement, and a rank mutant passed."""
    handle = open_adapter("mutant:rank-own-generator", timeout=60, isolated=False)
    try:
        assert handle.factory_ref == ("name", "mutant:rank-own-generator")
    finally:
        handle.close()
    instance = plain_handle(ReferenceEngine(), timeout=60)
    assert instance.factory_ref is None          # an instance given as such cannot be rebuilt


class DeclaresAcceptance(ReferenceEngine):
    """The acceptance law's declarations (`engine_acceptance`): each must reach the audit's handle."""

    verify_rule = "sample-match"
    draft_sampling = "argmax"
    acceptance_skip = "its API reports no counters"


def test_the_acceptance_declarations_are_mirrored():
    with open_adapter(DeclaresAcceptance, timeout=60) as h:
        assert h.isolated
        assert (h.verify_rule, h.draft_sampling, h.acceptance_skip, h.draft_schedule) == (
            "sample-match", "argmax", "its API reports no counters", ReferenceEngine.draft_schedule)
