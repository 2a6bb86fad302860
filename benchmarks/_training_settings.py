"""What the training benchmark measures, without importing torch: ``benchmarks/training.py`` takes its
parameters from here. asv imports a benchmark's module afresh for every parameter combination (27 of
them for the training figures), and torch's import costs each 3.6 to 4.9 s on an H100 machine of the
GPU image (git show 418dba5:benchmarks/results/rehearsal/h100-run18-main-job/import-cost.txt)."""

LLAMA3_8B_LAYER = {  # Llama-3-8B's layer dimensions; the vocabulary is not a layer's (see VOCAB)
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}
VOCAB = 32000  # Llama-2's: the output layer is bf16 and not LoRA'd; Llama-3's 128256 would add time no column changes
TINY = {"hidden_size": 128, "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 2}
SETTINGS = ((1, 512), (1, 2048), (4, 2048))  # batch, sequence
COLUMNS = ("bitsandbytes", "unsloth", "nf4kernel")
TRITON_OP = "nf4kernel as triton_op"  # compiled only: benchmarks/_triton_op.py
