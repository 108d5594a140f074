"""KV-cache capacity on a model's real shape, by hand: a Llama-shaped model (every layer holds
every token) and a Gemma-3-shaped one (five of every six layers hold a 512-token window)."""
import pytest

from workers.science.capacity import kv_capacity, sliding_windows

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "hidden_size": 576, "max_position_embeddings": 8192}
GEMMA3 = {"num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
          "hidden_size": 640, "max_position_embeddings": 32768, "sliding_window": 512,
          "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3}


def test_a_model_whose_layers_hold_every_token():
    cap = kv_capacity(SMOLLM2, ["fp8_e4m3"] * 30)
    assert cap["bytes_per_token_bf16"] == 30 * 3 * 64 * 2 * 2 == 23040
    assert cap["bytes_per_token"] == 11520 and cap["capacity_ratio"] == 2.0
    assert "at_context" not in cap and "sliding_layers" not in cap


def test_sliding_layers_hold_their_window_so_the_global_layers_carry_a_long_context():
    assert sliding_windows(GEMMA3) == ([512] * 5 + [None]) * 3
    all_fp8 = kv_capacity(GEMMA3, ["fp8_e4m3"] * 18)
    assert all_fp8["bytes_per_token_bf16"] == 18 * 1 * 256 * 2 * 2 == 18432 and all_fp8["capacity_ratio"] == 2.0
    at = all_fp8["at_context"]
    # 3 global layers x 1,024 B/token, 15 sliding layers x 1,024 B x 512 tokens spread over 32,768
    assert at["tokens"] == 32768 and at["bytes_per_token_bf16"] == pytest.approx(3 * 1024 + 15 * 1024 * 512 / 32768)
    assert at["bytes_per_token_bf16"] == pytest.approx(3312.0) and at["capacity_ratio"] == pytest.approx(2.0)
    assert all_fp8["sliding_layers"] == 15
    # keeping the three global layers in BF16 nearly cancels FP8 at a long context; three sliding ones barely matter
    keep_global = ["fp8_e4m3" if w else None for w in sliding_windows(GEMMA3)]
    keep_sliding = [None, None, None] + ["fp8_e4m3"] * 15
    assert kv_capacity(GEMMA3, keep_global)["at_context"]["capacity_ratio"] == pytest.approx(3312 / (3072 + 120))
    assert kv_capacity(GEMMA3, keep_sliding)["at_context"]["capacity_ratio"] == pytest.approx(3312 / (1536 + 48 + 96))
    # per token at a short context both keep 3 of 18 layers: the same 18432 / 15360
    assert kv_capacity(GEMMA3, keep_global)["capacity_ratio"] == kv_capacity(GEMMA3, keep_sliding)["capacity_ratio"]
