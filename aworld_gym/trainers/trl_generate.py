"""Generation backends of the TRL adapter: token ids in, sampled ids and their logprobs out."""

from __future__ import annotations

from typing import Any

from aworld_gym.rollout.tokens import Generate


def model_generate(model: Any, tokenizer: Any, temperature: float = 1.0, **generate_kwargs: Any) -> Generate:
    """Sample with an HF causal LM: left-padded batches, the sampled ids and their logprobs under
    ``log_softmax(logits / temperature)`` (how TRL scores them)."""
    import torch

    tok = getattr(tokenizer, "tokenizer", tokenizer)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def generate(inputs: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        if not inputs:
            return []
        width = max(len(x) for x in inputs)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in inputs])
        attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs])
        kwargs = {"do_sample": True, "temperature": temperature, "pad_token_id": pad, "eos_token_id": tok.eos_token_id}
        kwargs.update(generate_kwargs)
        kwargs.update(max_new_tokens=max_new_tokens, output_logits=True, return_dict_in_generate=True)
        kwargs.pop("cache_implementation", None)
        with torch.no_grad():
            device = next(model.parameters()).device
            out = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), **kwargs)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu() / (temperature or 1.0)
        lps = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [(new[i].tolist(), lps[i].tolist()) for i in range(len(inputs))]

    return generate


def hf_generate(trainer: Any) -> Generate:
    """Sample with the trainer's HF model (``unwrap_model_for_generation``, the trainer's sampling settings)."""
    from trl.models.utils import unwrap_model_for_generation

    kwargs = dict(getattr(trainer, "generation_kwargs", None) or {})
    temperature = float(kwargs.pop("temperature", None) or getattr(trainer, "temperature", 1.0) or 1.0)

    def generate(inputs: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            return model_generate(model, trainer.processing_class, temperature, **kwargs)(inputs, max_new_tokens)

    return generate


def vllm_generate(trainer: Any) -> Generate:
    """Sample with the trainer's vLLM (server or colocate mode): token ids in, token ids and logprobs out."""
    gen = trainer.vllm_generation

    def generate(inputs: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        saved = gen.max_completion_length
        gen.max_completion_length = max_new_tokens
        try:
            _, completion_ids, logprobs, _ = gen.generate(prompts=inputs, images=None, num_generations=1)
        finally:
            gen.max_completion_length = saved
        out = []
        for i, ids in enumerate(completion_ids):
            lp = None if logprobs is None else [x[0] if isinstance(x, list | tuple) else x for x in logprobs[i]]
            out.append((list(ids), lp))
        return out

    return generate
