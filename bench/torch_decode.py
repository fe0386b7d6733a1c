#!/usr/bin/env python3
"""Reference beside bench_gpu (issue 29): the same llama-3.1-8b shape in bf16 through Hugging Face
transformers' eager generate on the same GPU, batch 1, greedy. Prints the decode time per token
(a prefill of CTX tokens, then NEW tokens; the per-token time is (t(NEW) - t(1)) / (NEW - 1), so the
prefill cancels) and one line `BENCH torch_decode_ms <ms>` for scripts/gpu-check.sh.

Weights are random (initialised on the GPU from the config, no download): decode time does not
depend on their values. Run on the device machine only (needs torch, transformers and a GPU);
exits 0 with a message otherwise.
"""
import os
import sys
import time


def main():
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception as e:  # noqa: BLE001
        print(f"torch_decode: no torch/transformers here ({e}); nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("torch_decode: no GPU visible; nothing to measure")
        return 0
    ctx = int(os.environ.get("CTX", "512"))
    new = int(os.environ.get("NEW", "64"))
    # llama-3.1-8b (loom synth_shape "llama-3.1-8b"): the public config's sizes.
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    t0 = time.time()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.eval()
    print(f"torch {torch.__version__}, transformers model built on {torch.cuda.get_device_name(0)} "
          f"in {time.time() - t0:.1f} s")
    ids = torch.randint(3, 1000, (1, ctx), device="cuda")

    def gen(n):
        torch.cuda.synchronize()
        t = time.time()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True,
                           pad_token_id=0)
        torch.cuda.synchronize()
        return time.time() - t

    gen(4)  # warm-up
    t1 = min(gen(1) for _ in range(2))
    tn = min(gen(new) for _ in range(2))
    ms = (tn - t1) / (new - 1) * 1e3
    print(f"transformers eager generate, batch 1, context {ctx}: {ms:.2f} ms/token")
    print(f"BENCH torch_decode_ms {ms:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
