"""OpenVINO GenAI 2026.4.1, ContinuousBatchingPipeline with a draft model: what comes back past the
sampler -- per-token logprobs, stop strings, the generated-token count -- against the same pipeline
without a draft. Uses only openvino / openvino_genai.

    python openvino_serving_outputs.py TARGET_IR DRAFT_IR

TARGET_IR / DRAFT_IR: OpenVINO IR folders (with openvino_tokenizer/detokenizer.xml) of a target and its
draft; the ones `specverify audit openvino-serving` builds are <cache>/openvino/serving-target-V4-s0-pieces
and serving-draft-V4-s1-pieces (4 tokens "a".."d", one character a token, f32). Output: ...out beside
this file. For each pipeline (plain, draft model, prompt lookup), seeded runs (temperature 1, rng_seed per request, 12 new
tokens, requests added together and stepped to the end, as a server does):

  logprobs  a returned token that is the argmax at its prefix must carry the logprob a one-token greedy
            request at that prefix returns (GenerationConfig.logprobs = 1) -- counted where it does not
  stop      the 88 stopped requests added together (the draft pipeline fails there); then, one request a
            wave, for each run and position j the stop string = the text of tokens j-1..j
            (include_stop_str_in_output True): the answer must be the unstopped run's (also alone)
            ids[:j'+1], j' the first completion, finish STOP
  count     PerfMetrics.get_num_generated_tokens() against the ids returned, caps 1..12

GenerationConfig.max_ngram_size is set for prompt lookup only: in one run it was also set on the
draft-model pipeline's requests, and then its logprobs and count lines read 0 (as plain) while its stop
failures stayed -- what the draft pipeline runs with that field set was not established.
"""
import sys

import numpy as np
import openvino as ov
import openvino_genai as genai

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
V, N, KAPPA, RUNS = 4, 12, 3, 8
LOOKUP = "prompt lookup"
LOOKUP_RUN = False            # set while the prompt-lookup pipeline runs
PROMPTS = [[1, 2, 2, 3, 1, 1], [0, 1, 2], [3, 3, 0], [2, 1, 0, 3]]


def pipeline(target, draft):
    sc = genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.enable_prefix_caching = 0, 512, False
    props = dict(F32)
    if draft == LOOKUP:
        props["prompt_lookup"] = True
    elif draft:
        props["draft_model"] = genai.draft_model(draft, "CPU", **F32)
    return genai.ContinuousBatchingPipeline(target, sc, "CPU", props)


def config(n, seed=None, stop=None, include=True):
    c = genai.GenerationConfig()
    c.max_new_tokens, c.eos_token_id, c.stop_token_ids, c.ignore_eos = n, V, {V}, True
    c.num_assistant_tokens, c.logprobs = KAPPA, 1
    if LOOKUP_RUN:
        c.max_ngram_size = 2          # prompt lookup only (set with a draft model, it changes what runs)
    c.do_sample = seed is not None
    if seed is not None:
        c.do_sample, c.temperature, c.top_k, c.top_p, c.rng_seed = True, 1.0, 0, 1.0, seed
    if stop:
        c.stop_strings, c.include_stop_str_in_output = {stop}, include
    return c


def wave(pipe, reqs):
    """[(ids, logprobs, finish reason, generated-token count)] of requests added together."""
    hs = [pipe.add_request(i, ov.Tensor(np.array([p], np.int64)), c) for i, (p, c) in enumerate(reqs)]
    while pipe.has_non_finished_requests():
        pipe.step()
    out = []
    for h in hs:
        o = h.read_all()
        o = o[0] if o else None
        out.append(([] if o is None else list(o.generated_ids), [] if o is None else list(o.generated_log_probs),
                    "nothing" if o is None else o.finish_reason.name, h.get_perf_metrics().get_num_generated_tokens()))
    return out


def audit(label, pipe, tok, pipe_again):
    runs = [(p, config(N, seed=100 + i)) for i, p in enumerate(PROMPTS * (RUNS // len(PROMPTS)))]
    got = wave(pipe, runs)
    # logprobs
    forced = wave(pipe, [(p + ids[:j], config(1)) for (p, _), (ids, *_) in zip(runs, got) for j in range(len(ids))])
    it = iter(forced)
    compared = bad = 0
    example = None
    for (p, _), (ids, lps, *_) in zip(runs, got):
        for j, t in enumerate(ids):
            f_ids, f_lps, *_ = next(it)
            if f_ids[0] == t:
                compared += 1
                if abs(f_lps[0] - lps[j]) > 1e-3:
                    bad += 1
                    example = example or (p, ids, j, lps[j], f_lps[0])
    print(f"{label:6s} logprobs: {bad} of {compared} argmax tokens of seeded runs carry another logprob than "
          f"the one-token greedy request at their prefix" + (f"; e.g. prompt {example[0]} run {example[1]} position "
                                                            f"{example[2]}: {example[3]:.6f} vs {example[4]:.6f}" if example else ""))
    # stop strings
    cases = bad_ids = bad_finish = missing = 0
    example = None
    reqs, wants = [], []
    alone = [wave(pipe, [r])[0] for r in runs]       # the unstopped runs one a wave, as the stopped ones run
    for (p, c), (ids, *_) in zip(runs, alone):
        text = tok.decode(ids)
        for j in range(1, len(ids)):
            stop = text[j - 1:j + 1]
            first = text.find(stop) + len(stop) - 1          # one character a token: the completing token
            reqs.append((p, config(N, seed=c.rng_seed, stop=stop)))
            wants.append((ids[:first + 1], stop))
    try:
        wave(pipe, reqs)
        answers = [wave(pipe, [r])[0] for r in reqs]
    except RuntimeError as exc:            # the pipeline is unusable after this: a new one, one request a wave
        print(f"{label:6s} stop    : the {len(reqs)} stopped requests added together: RuntimeError "
              f"{str(exc).strip().splitlines()[-1]!r}; again one request at a time on a new pipeline:")
        pipe = pipe_again()
        answers = []
        for r in reqs:
            try:
                answers.append(wave(pipe, [r])[0])
            except RuntimeError:           # counted below; the pipeline is rebuilt
                answers.append(None)
                pipe = pipe_again()
    crashed = sum(a is None for a in answers)
    if crashed:
        print(f"{label:6s} stop    : {crashed} of {len(reqs)} stopped requests alone raise the same RuntimeError")
    for (want, stop), answer in zip(wants, answers):
        if answer is None:
            continue
        ids, _, fin, _ = answer
        cases += 1
        bad_ids += ids != want
        bad_finish += fin != "STOP"
        missing += fin == "STOP" and stop not in tok.decode(ids)
        if (ids != want or fin != "STOP") and example is None:
            example = (stop, want, ids, fin)
    print(f"{label:6s} stop    : {cases} stopped requests (include_stop_str_in_output): {bad_ids} return other ids "
          f"than the run up to the first completion, {bad_finish} a finish reason other than STOP, {missing} "
          f"finish STOP with ids whose text does not hold the stop string"
          + (f"; e.g. stop {example[0]!r}: want {example[1]}, got {example[2]} finish {example[3]}" if example else ""))
    # the generated-token count
    caps = [(p, config(n, seed=100 + i)) for i, p in enumerate(PROMPTS) for n in range(1, N + 1)]
    res = wave(pipe, caps)
    over = [(len(ids), cnt) for ids, _, _, cnt in res if cnt != len(ids)]
    print(f"{label:6s} count   : {len(over)} of {len(res)} capped requests report get_num_generated_tokens() != "
          f"the ids returned" + (f"; e.g. (ids, count) {over[:4]}" if over else ""))


def main():
    target, draft = sys.argv[1], sys.argv[2]
    print("openvino", ov.__version__, "openvino_genai", genai.__version__)
    tok = genai.Tokenizer(target)
    global LOOKUP_RUN
    for label, d in (("plain", None), ("draft", draft), ("lookup", LOOKUP)):
        LOOKUP_RUN = d == LOOKUP
        audit(label, pipeline(target, d), tok, lambda d=d: pipeline(target, d))


if __name__ == "__main__":
    main()
