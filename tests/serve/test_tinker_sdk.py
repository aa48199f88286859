"""The unmodified tinker SDK against ``rllm serve tinker`` on the tiny model, over loopback HTTP.

Each test is what a Tinker user does: create a LoRA training client, train with a built-in loss, save
weights for a sampler, sample; and each checks the numbers against rllm computing the same thing
directly (the loss and gradient of ``importance_sampling``, the sampler's logprobs against the trainer's).
"""

from __future__ import annotations

import math

import httpx
import pytest
import tinker
import torch
from tinker import types
from tinker_support import API_KEY, MAX_SAMPLERS

from rllm.serve.tinker import ServerThread, TinkerService
from rllm.trainer.backends.local import LocalBackend

TOKENS = [1, 520, 9531, 198, 4093, 33, 216, 34, 1780, 314, 260, 1234]


def ce_datum(tokens: list[int], weights: list[float] | None = None) -> types.Datum:
    """Supervised datum the cookbook's way: input tokens[:-1], targets tokens[1:]."""
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights or [1.0] * (len(tokens) - 1)},
    )


def rl_datum(tokens: list[int], logprobs: list[float], advantages: list[float]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": logprobs, "advantages": advantages},
    )


def logprobs_of(out: types.ForwardBackwardOutput, i: int = 0) -> list[float]:
    return list(out.loss_fn_outputs[i]["logprobs"].data)


def backend_of(service: TinkerService, training_client: tinker.TrainingClient) -> LocalBackend:
    backend = service.models[training_client.model_id].model.backend
    assert backend is not None
    return backend


def test_capabilities_info_and_a_local_tokenizer(
    tinker_server: ServerThread, service_client, base_model
) -> None:
    caps = (
        tinker.RestClient(base_url=tinker_server.base_url, api_key=API_KEY).get_server_capabilities().result()
    )
    assert [m.model_name for m in caps.supported_models] == [base_model]
    training_client = service_client.create_lora_training_client(base_model=base_model, rank=4).result()
    info = training_client.get_info()
    assert info.is_lora and info.lora_rank == 4 and info.model_data.model_name == base_model
    assert info.model_data.tokenizer_id == base_model  # a directory: the SDK loads it without the hub
    tokenizer = training_client.get_tokenizer()
    assert tokenizer.decode(tokenizer.encode("hello world")) == "hello world"


def test_cross_entropy_steps_lower_the_loss(service_client, base_model) -> None:
    training_client = service_client.create_lora_training_client(
        base_model=base_model, rank=8, seed=1
    ).result()
    datum = ce_datum(TOKENS)
    losses = []
    for _ in range(4):
        fwd_bwd = training_client.forward_backward([datum], "cross_entropy")
        optim = training_client.optim_step(types.AdamParams(learning_rate=2e-2))
        out = fwd_bwd.result()
        optim.result()
        losses.append(out.metrics["loss:sum"])
        # Tinker's loss is the sum over target tokens of -logprob * weight (weights all 1 here)
        assert out.metrics["loss:sum"] == pytest.approx(-sum(logprobs_of(out)), rel=1e-5)
    assert losses[-1] < losses[0] - 1.0, losses
    after = training_client.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert after < losses[-1]


def test_importance_sampling_loss_and_gradient_equal_rllm_summed(
    tinker_service: TinkerService, service_client, base_model
) -> None:
    """The service's ``importance_sampling`` is rllm's ``is`` loss summed over tokens: same loss:sum, the
    same per-token logprobs and the same LoRA gradient as ``sum_t -exp(logp_t - q_t) * A_t`` computed
    by hand with autograd on a LocalBackend built alike."""
    training_client = service_client.create_lora_training_client(
        base_model=base_model, rank=4, seed=7
    ).result()
    # one step first, so the adapter is not zero and every LoRA matrix gets a gradient
    training_client.forward_backward([ce_datum(TOKENS)], "cross_entropy").result()
    training_client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    backend = backend_of(tinker_service, training_client)
    ref_state = {n: p.detach().clone() for n, p in backend.model.named_parameters()}
    seqs = [TOKENS, TOKENS[3:] + [42, 43]]
    q = [[-10.5 + 0.1 * (t % 3) for t in range(len(s) - 1)] for s in seqs]
    adv = [[0.0] * 3 + [1.0] * (len(seqs[0]) - 4), [-0.5] * (len(seqs[1]) - 1)]
    out = training_client.forward_backward(
        [rl_datum(s, lp, a) for s, lp, a in zip(seqs, q, adv)], "importance_sampling"
    ).result()
    served_grads = {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None}

    reference = LocalBackend(backend.cfg, backend.model_path, pad_id=backend.pad_id)
    with torch.no_grad():
        for n, p in reference.model.named_parameters():
            p.copy_(ref_state[n])
    total = torch.zeros(())
    for i, (s, lp_q, a) in enumerate(zip(seqs, q, adv)):
        logits = reference.model(input_ids=torch.tensor([s[:-1]])).logits[0].float()
        lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(s[1:])[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs_of(out, i)), lp.detach(), rtol=0, atol=1e-5)
        total = total - (torch.exp(lp - torch.tensor(lp_q)) * torch.tensor(a)).sum()
    total.backward()
    assert out.metrics["loss:sum"] == pytest.approx(float(total.detach()), rel=1e-5, abs=1e-6)
    ref_grads = {n: p.grad for n, p in reference.model.named_parameters() if p.grad is not None}
    assert served_grads.keys() == ref_grads.keys() and served_grads
    for name, grad in ref_grads.items():  # relative to the tensor's largest entry (summation order differs)
        assert float((served_grads[name] - grad).abs().max()) <= 1e-4 * float(grad.abs().max()) + 1e-12, name


def test_a_group_sharing_its_prompt_trains_once_on_it_and_reports_every_logprob(
    service_client, base_model
) -> None:
    """Targets of advantage 0 (a group's shared prompt, a hole for an environment's turn) are left out of
    the pass that trains (the prompt then runs once for the group); their logprobs come back all the same,
    equal to a forward over every target with the same weights."""
    training_client = service_client.create_lora_training_client(
        base_model=base_model, rank=4, seed=5
    ).result()
    prompt = TOKENS[:6]
    answers = [[21, 22, 23], [24, 25], [26, 27, 28, 29]]
    data = []
    for j, answer in enumerate(answers):
        tokens = prompt + answer
        n = len(tokens) - 1
        advantages = [0.0] * (len(prompt) - 1) + [1.0 - j] * len(answer)
        if j == 2:
            advantages[-2] = 0.0  # a hole inside the answer
        data.append(rl_datum(tokens, [-3.0] * n, advantages))
    trained = training_client.forward_backward(data, "importance_sampling").result()
    full = training_client.forward(
        [ce_datum(prompt + answer) for answer in answers], "cross_entropy"
    ).result()  # no optim_step in between: the same weights
    for i in range(len(answers)):
        got, want = logprobs_of(trained, i), logprobs_of(full, i)
        assert len(got) == len(want) and all(v != 0.0 for v in got)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=0, atol=1e-5)


def test_forward_backward_custom_runs_its_loss_client_side(service_client, base_model) -> None:
    """The SDK's custom loss: a forward, then a cross_entropy backward with weights -dLoss/dlogprobs; a
    loss of -2 * sum(logprobs) gives the gradient of cross_entropy with weights 2."""
    custom_client = service_client.create_lora_training_client(base_model=base_model, rank=4, seed=9).result()
    twice_client = service_client.create_lora_training_client(base_model=base_model, rank=4, seed=9).result()

    def doubled_nll(data, logprobs_list):
        loss = sum(-2.0 * lp.sum() for lp in logprobs_list)
        return loss, {"doubled:sum": float(loss.detach())}

    out = custom_client.forward_backward_custom([ce_datum(TOKENS)], doubled_nll).result()
    twice = twice_client.forward_backward(
        [ce_datum(TOKENS, [2.0] * (len(TOKENS) - 1))], "cross_entropy"
    ).result()
    assert out.metrics["loss:sum"] == pytest.approx(twice.metrics["loss:sum"], rel=1e-5)
    for client in (custom_client, twice_client):
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = [
        logprobs_of(c.forward([ce_datum(TOKENS)], "cross_entropy").result())
        for c in (custom_client, twice_client)
    ]
    torch.testing.assert_close(torch.tensor(after[0]), torch.tensor(after[1]), rtol=0, atol=1e-5)


def test_sampled_logprobs_match_the_trainers(service_client, base_model) -> None:
    training_client = service_client.create_lora_training_client(
        base_model=base_model, rank=4, seed=3
    ).result()
    training_client.forward_backward([ce_datum(TOKENS)], "cross_entropy").result()
    training_client.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    path = training_client.save_weights_for_sampler("after-one-step").result().path
    assert path == f"tinker://{training_client.model_id}/sampler_weights/after-one-step"
    sampler = service_client.create_sampling_client(model_path=path).result()
    prompt = TOKENS[:5]
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    result = sampler.sample(
        types.ModelInput.from_ints(prompt), num_samples=3, sampling_params=params
    ).result()
    assert len(result.sequences) == 3
    assert len({tuple(s.tokens) for s in result.sequences}) > 1
    for seq in result.sequences:
        assert len(seq.tokens) == 6 and seq.stop_reason == "length" and len(seq.logprobs) == 6
        out = training_client.forward([ce_datum(prompt + list(seq.tokens))], "cross_entropy").result()
        trained = logprobs_of(out)[len(prompt) - 1 :]
        torch.testing.assert_close(torch.tensor(seq.logprobs), torch.tensor(trained), rtol=0, atol=2e-4)
    # the same seed samples the same tokens; prompt logprobs are the trainer's too
    again = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=3, sampling_params=params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in result.sequences]
    prompt_lp = sampler.compute_logprobs(types.ModelInput.from_ints(prompt)).result()
    assert prompt_lp[0] is None
    trained = logprobs_of(training_client.forward([ce_datum(prompt)], "cross_entropy").result())
    torch.testing.assert_close(torch.tensor(prompt_lp[1:]), torch.tensor(trained), rtol=0, atol=2e-4)


def test_stop_tokens_greedy_and_the_base_model(service_client, base_model) -> None:
    base = service_client.create_sampling_client(base_model=base_model).result()
    prompt = types.ModelInput.from_ints(TOKENS[:6])
    greedy = types.SamplingParams(max_tokens=8, temperature=0.0)
    (full,) = base.sample(prompt, 1, greedy).result().sequences
    stop_at = full.tokens[2]
    (cut,) = base.sample(prompt, 1, greedy.model_copy(update={"stop": [stop_at]})).result().sequences
    assert cut.tokens == full.tokens[: full.tokens.index(stop_at) + 1] and cut.stop_reason == "stop"
    # a training client's first sampler has exactly the base weights (LoRA B starts at zero)
    training_client = service_client.create_lora_training_client(base_model=base_model, rank=4).result()
    sampler = training_client.save_weights_and_get_sampling_client().result()
    (same,) = sampler.sample(prompt, 1, greedy).result().sequences
    assert same.tokens == full.tokens
    torch.testing.assert_close(torch.tensor(same.logprobs), torch.tensor(full.logprobs), rtol=0, atol=1e-5)


def test_two_sessions_are_isolated(
    tinker_server: ServerThread, tinker_service: TinkerService, service_client, base_model
) -> None:
    other_client = tinker.ServiceClient(base_url=tinker_server.base_url, api_key=API_KEY)
    their_path = None
    try:
        mine = service_client.create_lora_training_client(base_model=base_model, rank=4, seed=5).result()
        theirs = other_client.create_lora_training_client(base_model=base_model, rank=4, seed=5).result()
        assert mine.model_id != theirs.model_id
        theirs.forward_backward([ce_datum(TOKENS)], "cross_entropy").result()
        theirs.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        their_path = theirs.save_weights_for_sampler("theirs").result().path
        sampler = other_client.create_sampling_client(model_path=their_path).result()
        unnamed = theirs.save_weights_and_get_sampling_client().result()
        prompt, greedy = (
            types.ModelInput.from_ints(TOKENS[:6]),
            types.SamplingParams(max_tokens=6, temperature=0.0),
        )
        before = sampler.sample(prompt, 1, greedy).result().sequences[0]
        their_lp = logprobs_of(theirs.forward([ce_datum(TOKENS)], "cross_entropy").result())
        for _ in range(3):  # train the other model hard
            mine.forward_backward([ce_datum(TOKENS[::-1])], "cross_entropy")
            mine.optim_step(types.AdamParams(learning_rate=0.1)).result()
        after = sampler.sample(prompt, 1, greedy).result().sequences[0]
        assert after.tokens == before.tokens
        torch.testing.assert_close(
            torch.tensor(after.logprobs), torch.tensor(before.logprobs), rtol=0, atol=0
        )
        assert logprobs_of(theirs.forward([ce_datum(TOKENS)], "cross_entropy").result()) == their_lp
    finally:
        other_client.close("success").result(timeout=30)
    # closing a session frees its models and their unnamed sampler weights; named ones stay for later use
    assert theirs.model_id not in tinker_service.models and mine.model_id in tinker_service.models
    assert their_path is not None and tinker_service.samplers.has(their_path)
    later = service_client.create_sampling_client(model_path=their_path).result()
    assert later.sample(prompt, 1, greedy).result().sequences[0].tokens == before.tokens
    assert not tinker_service.samplers.has(f"tinker://{theirs.model_id}/sampler_weights/ephemeral-0")
    assert unnamed is not None


def test_refusals_fail_their_request_only(tinker_service: TinkerService, service_client, base_model) -> None:
    training_client = service_client.create_lora_training_client(base_model=base_model, rank=4).result()
    first = training_client.forward([ce_datum(TOKENS)], "cross_entropy").result()
    with pytest.raises(tinker.RequestFailedError, match="loss_fn 'dro' is not supported"):
        training_client.forward_backward([ce_datum(TOKENS)], "dro").result()
    shifted_wrong = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[:-1], "weights": [1.0] * (len(TOKENS) - 1)},
    )
    with pytest.raises(tinker.RequestFailedError, match=r"target_tokens must be model_input shifted by one"):
        training_client.forward_backward([shifted_wrong], "cross_entropy").result()
    with pytest.raises(tinker.RequestFailedError, match=r"lacks \['advantages', 'logprobs'\]"):
        training_client.forward_backward([ce_datum(TOKENS)], "ppo").result()
    with pytest.raises(tinker.RequestFailedError, match="not read by 'importance_sampling'"):
        training_client.forward_backward(
            [rl_datum(TOKENS, [-1.0] * 11, [1.0] * 11)], "importance_sampling", {"clip_low_threshold": 0.5}
        ).result()
    # nothing happened to the model: the refused requests neither trained it nor blocked its queue
    assert logprobs_of(training_client.forward([ce_datum(TOKENS)], "cross_entropy").result()) == logprobs_of(
        first
    )
    ppo = training_client.forward(
        [rl_datum(TOKENS, logprobs_of(first), [1.0] * 11)],
        "ppo",
        {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1},
    ).result()
    assert ppo.metrics["loss:sum"] == pytest.approx(-11.0, rel=1e-4)  # ratio 1 everywhere: -sum(A)
    sampler = service_client.create_sampling_client(base_model=base_model).result()
    with pytest.raises(tinker.RequestFailedError, match="not supported by rllm serve tinker"):
        sampler.sample(
            types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=2), topk_prompt_logprobs=2
        ).result()


def test_http_refusals(tinker_server: ServerThread, tinker_service: TinkerService, base_model) -> None:
    url = tinker_server.base_url + "/api/v1"
    headers = {"X-API-Key": API_KEY}
    with httpx.Client(timeout=30) as http:
        assert http.get(f"{url}/healthz").json() == {"status": "ok"}
        denied = http.get(f"{url}/get_server_capabilities", headers={"X-API-Key": "tml-wrong"})
        assert denied.status_code == 401 and "invalid API key" in denied.json()["detail"]
        missing = http.post(f"{url}/get_info", json={"model_id": "nope:train:0"}, headers=headers)
        assert missing.status_code == 404 and "unknown model_id 'nope:train:0'" in missing.json()["detail"]
        session = http.post(
            f"{url}/create_session",
            json={"tags": [], "user_metadata": None, "sdk_version": "x"},
            headers=headers,
        ).json()["session_id"]
        wrong_base = http.post(
            f"{url}/create_model",
            json={
                "session_id": session,
                "model_seq_id": 0,
                "base_model": "Qwen/Qwen3-8B",
                "lora_config": {"rank": 4},
            },
            headers=headers,
        )
        assert (
            wrong_base.status_code == 400
            and f"this server serves {base_model!r}" in wrong_base.json()["detail"]
        )
        bad = http.post(f"{url}/optim_step", json={"model_id": 3}, headers=headers)
        assert bad.status_code == 400 and bad.json()["detail"].startswith("invalid OptimStepRequest")
        assert http.post(f"{url}/sessions/{session}/finish", json={}, headers=headers).status_code == 200
        gone = http.post(f"{url}/session_heartbeat", json={"session_id": session}, headers=headers)
        assert gone.status_code == 410


def test_evicted_sampler_weights_give_a_clear_error(service_client, base_model) -> None:
    training_client = service_client.create_lora_training_client(base_model=base_model, rank=4).result()
    paths = [training_client.save_weights_for_sampler(f"v{i}").result().path for i in range(MAX_SAMPLERS + 1)]
    prompt, params = types.ModelInput.from_ints(TOKENS[:4]), types.SamplingParams(max_tokens=2)
    newest = service_client.create_sampling_client(model_path=paths[-1]).result()
    assert len(newest.sample(prompt, 1, params).result().sequences[0].tokens) == 2
    with pytest.raises(tinker.BadRequestError, match=f"sampler weights {paths[0]} were evicted"):
        service_client.create_sampling_client(model_path=paths[0]).result()


def test_save_and_load_state_round_trip(service_client, base_model) -> None:
    training_client = service_client.create_lora_training_client(
        base_model=base_model, rank=4, seed=2
    ).result()
    datum, adam = ce_datum(TOKENS), types.AdamParams(learning_rate=3e-2)
    training_client.forward_backward([datum], "cross_entropy").result()
    training_client.optim_step(adam).result()
    path = training_client.save_state("step-1").result().path
    assert path == f"tinker://{training_client.model_id}/weights/step-1"
    saved = logprobs_of(training_client.forward([datum], "cross_entropy").result())

    def step_then_logprobs(client: tinker.TrainingClient) -> list[float]:
        client.forward_backward([datum], "cross_entropy")
        client.optim_step(adam).result()
        return logprobs_of(client.forward([datum], "cross_entropy").result())

    continued = step_then_logprobs(training_client)
    assert continued != saved
    with pytest.warns(FutureWarning):
        training_client.load_state_with_optimizer(path).result()
    assert logprobs_of(training_client.forward([datum], "cross_entropy").result()) == saved
    # the optimizer state came back too: the same step from the same state gives the same weights
    assert step_then_logprobs(training_client) == pytest.approx(continued, abs=1e-6)
    resumed = service_client.create_training_client_from_state_with_optimizer(path).result()
    assert resumed.model_id != training_client.model_id and resumed.get_info().lora_rank == 4
    assert logprobs_of(resumed.forward([datum], "cross_entropy").result()) == pytest.approx(saved, abs=1e-6)
    assert step_then_logprobs(resumed) == pytest.approx(continued, abs=1e-6)
    with pytest.raises(tinker.RequestFailedError, match="exists: pass overwrite=True"):
        training_client.save_state("step-1").result()
    assert not math.isnan(saved[0])
