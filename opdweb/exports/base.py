"""What every trainer export shares: the provenance it vouches for, the notes on what a
tool cannot take, and the settings all of them turn on."""
from __future__ import annotations

from dataclasses import dataclass

from opdweb.exports.quoting import comment

#: Token-level truncated importance sampling, the correction every export turns on.
TIS_THRESHOLD = 2.0


@dataclass(frozen=True)
class Provenance:
    """What an export vouches for: which config, cleared by whom, on what evidence."""

    config_hash: str
    config_name: str
    checkpoint: str
    approval_id: int
    approved_by: str
    approved_at: str
    admission_job_id: int
    verdict: str
    multiple: float | None

    def line(self) -> str:
        measured = f"{self.multiple:g}x BF16, " if self.multiple is not None else ""
        return (f"opdweb rollout config {self.config_hash} ({self.config_name}) for {self.checkpoint}; "
                f"approval #{self.approval_id} by {self.approved_by} at {self.approved_at}; "
                f"admission check #{self.admission_job_id}: {measured}{self.verdict}")


def notes(config: dict, target: str) -> list[str]:
    """What ``target`` cannot take from ``config`` as it stands."""
    out = []
    weights, scale = config["weights"], config["weight_scale"]
    if weights in ("int8", "int4"):
        out.append(f"{weights} weights: load a checkpoint quantized to {weights} (GPTQ/AWQ/compressed-tensors); "
                   f"the engine has no online {weights} quantization")
    if weights == "fp8_e5m2":
        out.append("fp8_e5m2 weights: the engines' online FP8 is E4M3; load a checkpoint quantized to E5M2")
    if weights.startswith("fp8") and scale != "tensor":
        what = "per-channel" if scale == "channel" else f"{config['block_size']}x{config['block_size']} block"
        out.append(f"{what} FP8 weight scales: online FP8 quantization uses per-tensor scales; "
                   f"load a checkpoint quantized with {what} scales (llm-compressor)")
    if config["noise_sigma"] > 0:
        out.append(f"noise_sigma {config['noise_sigma']:g} is a screening perturbation, not an engine setting; "
                   "it is not exported")
    if weights.startswith("fp8") and target == "slime":
        out.append("FP8 weights: --hf-checkpoint must name an FP8-quantized copy of the checkpoint")
    if config["staleness"] > 0 and target == "slime":
        out.append(f"staleness {config['staleness']}: slime has no off-policy step limit flag; "
                   "set the asynchronous rollout depth in your launcher")
    return out


def fp8_weights(config: dict) -> bool:
    """Whether the config asks for FP8 weights (either format: the engines quantize online to E4M3)."""
    return config["weights"].startswith("fp8")


def comment_block(provenance: Provenance, config: dict, target: str) -> list[str]:
    """The provenance line and ``target``'s notes as ``#`` comments, heading a text export
    (each one line whatever the names in it hold)."""
    return [comment(provenance.line())] + [comment(f"note: {n}") for n in notes(config, target)]
