"""Tiny random-weight configs per model type (hidden ~32, 2 layers, small images, short
audio): what `model=tiny_random model.random_init.model_type=<type>` builds, for tests and the
coverage benchmark. `model.random_init.config` overrides any field."""

from __future__ import annotations

from typing import Any

_TEXT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64, "vocab_size": 1000, "max_position_embeddings": 512}
_TYPED = {**_TEXT, "type_vocab_size": 2}  # models that take token_type_ids
# causal LMs: grouped-query attention (2 query heads per key/value head), 128 positions
_LM = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
       "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 1000,
       "max_position_embeddings": 128, "pad_token_id": 0, "bos_token_id": 1,
       "eos_token_id": 2}
_VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "image_size": 32, "patch_size": 8}
_AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 64, "conv_dim": [16] * 7, "num_conv_pos_embeddings": 16,
          "num_conv_pos_embedding_groups": 2, "vocab_size": 32}
_SEQ2SEQ = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
            "encoder_attention_heads": 2, "decoder_attention_heads": 2,
            "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 1000,
            "max_position_embeddings": 128, "pad_token_id": 1, "bos_token_id": 0,
            "eos_token_id": 2, "decoder_start_token_id": 2}
_CLIP_TOWERS = {
    "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                    "intermediate_size": 64, "vocab_size": 1000, "pad_token_id": 0,
                    "bos_token_id": 998, "eos_token_id": 999, "max_position_embeddings": 77},
    "vision_config": {**_VIT}, "projection_dim": 32}

TINY: dict[str, dict[str, Any]] = {
    "bert": _TYPED,
    "roberta": {**_TEXT, "type_vocab_size": 1, "pad_token_id": 1},
    "xlm-roberta": {**_TEXT, "type_vocab_size": 1, "pad_token_id": 1},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64,
                   "vocab_size": 1000, "max_position_embeddings": 512},
    "mpnet": {**_TEXT, "pad_token_id": 1},
    "electra": {**_TYPED, "embedding_size": 32},
    "deberta-v2": {**_TEXT, "relative_attention": True, "position_biased_input": False,
                   "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1},
    "modernbert": {**_TEXT, "local_attention": 64,
                   "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                   "cls_token_id": 1, "sep_token_id": 2},
    "layoutlm": {**_TYPED, "max_2d_position_embeddings": 1024},
    "layoutlmv3": {**_TEXT, "max_position_embeddings": 514, "type_vocab_size": 1,
                   "coordinate_size": 4, "shape_size": 8, "input_size": 32, "patch_size": 8},
    "vit": _VIT,
    "dinov2": {**{k: v for k, v in _VIT.items() if k != "intermediate_size"}, "mlp_ratio": 2},
    "beit": {**_VIT, "out_indices": [1, 2]},
    "swin": {"embed_dim": 16, "depths": [1, 1], "num_heads": [1, 2], "image_size": 32,
             "patch_size": 4, "window_size": 4},
    "swinv2": {"embed_dim": 16, "depths": [1, 1], "num_heads": [1, 2], "image_size": 32,
               "patch_size": 4, "window_size": 4},
    "convnext": {"hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2,
                 "image_size": 32},
    "resnet": {"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1],
               "layer_type": "basic"},
    "mobilevit": {"image_size": 64, "patch_size": 2, "hidden_sizes": [16, 24, 32],
                  "neck_hidden_sizes": [8, 8, 16, 16, 24, 32, 64], "num_attention_heads": 2,
                  "mlp_ratio": 2.0, "expand_ratio": 2.0,
                  # at the default 0.02 activations shrink layer by layer below LayerNorm's
                  # epsilon: logits of std 4e-5 that quantization noise swamps (HTP cosine -0.99)
                  "initializer_range": 0.4},
    "segformer": {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1],
                  "hidden_sizes": [16, 32], "patch_sizes": [7, 3], "strides": [4, 2],
                  "num_attention_heads": [1, 2], "mlp_ratios": [2, 2],
                  "decoder_hidden_size": 32},
    "dpt": {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
            "intermediate_size": 64, "image_size": 32, "patch_size": 8,
            "backbone_out_indices": [0, 1, 2, 3], "neck_hidden_sizes": [8, 16, 32, 32],
            "fusion_hidden_size": 16, "head_in_index": -1,
            # at 0.02 the depth is of std 6e-10, below the quantizer's smallest range (1e-4):
            # its last conv rounds to two levels (cosine 0.90 on HTP and 0.93 on the CPU)
            "initializer_range": 0.1},
    "depth_anything": {"backbone_config": {"model_type": "dinov2", "hidden_size": 32,
                                           "num_hidden_layers": 4, "num_attention_heads": 2,
                                           "mlp_ratio": 2, "image_size": 56, "patch_size": 14,
                                           "out_indices": [1, 2, 3, 4],
                                           "apply_layernorm": True,
                                           "reshape_hidden_states": False},
                       "neck_hidden_sizes": [8, 16, 32, 32], "fusion_hidden_size": 16,
                       "reassemble_hidden_size": 32, "patch_size": 14, "head_hidden_size": 8},
    "yolos": {**_VIT, "image_size": [32, 32], "num_detection_tokens": 10},
    "rt_detr": {"d_model": 32, "encoder_hidden_dim": 32, "encoder_in_channels": [32, 64, 64],
                "decoder_in_channels": [32, 32, 32], "encoder_ffn_dim": 64, "encoder_layers": 1,
                "decoder_layers": 1, "decoder_ffn_dim": 64, "decoder_attention_heads": 2,
                "encoder_attention_heads": 2, "num_queries": 20, "num_denoising": 0,
                "num_feature_levels": 3, "decoder_n_points": 2, "anchor_image_size": [64, 64],
                "backbone_config": {"model_type": "rt_detr_resnet", "embedding_size": 16,
                                    "hidden_sizes": [16, 32, 64, 64], "depths": [1, 1, 1, 1],
                                    "layer_type": "basic", "out_features": ["stage2", "stage3",
                                                                            "stage4"]}},
    # a ResNet of transformers' own as the backbone (its default is timm's ResNet-50)
    "detr": {"d_model": 32,
             "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
             "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
             "num_queries": 10,
             "backbone_config": {"model_type": "resnet", "embedding_size": 16,
                                 "hidden_sizes": [16, 32, 64, 64], "depths": [1, 1, 1, 1],
                                 "layer_type": "basic", "out_features": ["stage4"]}},
    "vitpose": {"backbone_config": {"model_type": "vitpose_backbone", "hidden_size": 32,
                                    "num_hidden_layers": 2, "num_attention_heads": 2,
                                    "intermediate_size": 64, "image_size": [64, 48],
                                    "patch_size": [16, 16], "out_indices": [2]}},
    "owlvit": {**_CLIP_TOWERS, "text_config": {**_CLIP_TOWERS["text_config"],
                                               "max_position_embeddings": 16}},
    "owlv2": {**_CLIP_TOWERS, "text_config": {**_CLIP_TOWERS["text_config"],
                                              "max_position_embeddings": 16}},
    "clip": _CLIP_TOWERS,
    "wav2vec2": _AUDIO,
    "hubert": _AUDIO,
    "audio-spectrogram-transformer": {"hidden_size": 32, "num_hidden_layers": 2,
                                      "num_attention_heads": 2, "intermediate_size": 64,
                                      "max_length": 64, "num_mel_bins": 32},
    "marian": {**_SEQ2SEQ, "pad_token_id": 999, "decoder_start_token_id": 999,
               "eos_token_id": 0},
    "bart": _SEQ2SEQ,
    "t5": {"d_model": 32, "d_kv": 16, "num_heads": 2, "num_layers": 2, "num_decoder_layers": 2,
           "d_ff": 64, "vocab_size": 1000, "relative_attention_num_buckets": 8,
           "relative_attention_max_distance": 16, "decoder_start_token_id": 0,
           "pad_token_id": 0, "eos_token_id": 1},
    # 2 s of audio: 200 log-mel frames, 100 encoder positions
    "whisper": {**{k: v for k, v in _SEQ2SEQ.items() if k != "max_position_embeddings"},
                "num_mel_bins": 80, "max_source_positions": 100, "max_target_positions": 64,
                "decoder_start_token_id": 3},
    # 80 filter-bank features a frame, two stride-2 convolutions: 400 frames (4 s), 100
    # positions (config.json says the kernels; the planner counts positions from them)
    "speech_to_text": {**{k: v for k, v in _SEQ2SEQ.items() if k != "max_position_embeddings"},
                       "input_feat_per_channel": 80, "conv_kernel_sizes": [5, 5],
                       "conv_channels": 64, "max_source_positions": 100,
                       "max_target_positions": 64},
    **{name: {**_LM, **extra} for name, extra in (
        ("llama", {}), ("mistral", {}), ("qwen2", {}), ("phi3", {}),
        ("qwen3", {"head_dim": 16}), ("gemma", {"head_dim": 16}))},  # their defaults: 128, 256
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 64, "vocab_size": 1000,
             "n_positions": 128, "bos_token_id": 1, "eos_token_id": 2},
    # BLIP's vision config initializes with a 1e-10 range: states near 0, cosines meaningless
    "blip": {"vision_config": {**_VIT, "initializer_range": 0.02}, "text_config": {
        **_TEXT, "encoder_hidden_size": _VIT["hidden_size"], "bos_token_id": 998,
        "sep_token_id": 102, "pad_token_id": 0, "eos_token_id": 2}},
    "vision-encoder-decoder": {
        "encoder": {"model_type": "vit", **_VIT},
        "decoder": {"model_type": "bert", **_TEXT, "is_decoder": True,
                    "add_cross_attention": True},
        "decoder_start_token_id": 101, "pad_token_id": 0},
}

# The preprocessor a tiny model gets where its config does not say its input size (a real
# checkpoint's preprocessor_config.json says it).
TINY_PREPROCESSOR: dict[str, dict[str, Any]] = {
    "resnet": {"image_size": 32}, "segformer": {"image_size": 64},
    "rt_detr": {"image_size": 64}, "detr": {"image_size": 64}, "vitpose": {"image_size": [64, 48]},
    "depth_anything": {"image_size": 56},
}

# A size field's tiny value, by its canonical name: set where a config class has the field
# (under that name or the name its attribute_map gives it), for a type TINY does not list.
GENERIC: dict[str, Any] = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 2, "intermediate_size": 128, "max_position_embeddings": 128,
    "head_dim": 32, "d_kv": 32, "d_ff": 128, "encoder_layers": 2, "decoder_layers": 2,
    "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128, "num_decoder_layers": 2, "num_layers": 2,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
    "v_head_dim": 32, "num_mel_bins": 16, "max_source_positions": 100,
    "max_target_positions": 64, "sliding_window": 64, "layer_types": None, "rotary_dim": 16,
    "vocab_size": 1000, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "decoder_start_token_id": 1,
    "hidden_size_per_layer_input": 16,  # per-layer token embeddings (Gemma 3n, Gemma 4)
}


def tiny_fields(config_cls: Any, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tiny values (GENERIC, then `values` over it) of the fields `config_cls` takes, each
    under the name the class takes it by (its own, or its attribute_map's)."""
    import inspect

    names = set(inspect.signature(config_cls.__init__).parameters)
    aliases = dict(getattr(config_cls, "attribute_map", {}) or {})
    out: dict[str, Any] = {}
    for field, value in {**GENERIC, **(values or {})}.items():
        for name in (field, aliases.get(field)):
            if name and name in names:
                out[name] = value
                break
    for name in names:  # other tables of the same token ids (Gemma 4's per-layer embeddings)
        if name.startswith("vocab_size_") and "vocab_size" in out:
            out[name] = out["vocab_size"]
    return {k: v for k, v in out.items() if v is not None or k == "layer_types"}


def generic(model_type: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tiny config for a model type TINY does not list, read from the size fields its
    transformers config class takes (and those of its sub-configs: text_config, encoder, ...);
    {} where transformers does not know the type."""
    try:
        from transformers import CONFIG_MAPPING
        config_cls = CONFIG_MAPPING[model_type]
    except (ImportError, KeyError, ValueError):
        return {}
    out = tiny_fields(config_cls, values)
    for name, sub in (getattr(config_cls, "sub_configs", None) or {}).items():
        if isinstance(sub, type) and getattr(sub, "model_type", ""):  # not AutoConfig
            out[name] = {"model_type": sub.model_type, **tiny_fields(sub, values)}
    return out
