"""What every trainer export shares: the provenance it vouches for, the refusal of what a
trainer would build differently from the admitted engine, and the header of text exports.

Each export module states, for its trainer at one version, what that trainer builds from
a rollout config and refuses (:class:`NotExpressible`, every difference named) where that
is not the engine the config was admitted on: a team never approves one engine while the
cluster builds another."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from opdweb.exports.quoting import comment
from workers.science.config import RolloutConfig
from workers.science.kernels import W8A8_GPUS, gemm
from workers.science.vllm_args import NotExpressible

__all__ = ["NotExpressible", "Provenance", "block_fp8_refusals", "comment_block", "gpu_note", "nearest_engine",
           "refuse_if"]


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
    method: str | None = None  # the budget's training method (``opd:full``, ``opd:sampled+tis``, ``grpo``)
    #: sha256 of the KV-scale file the export ships (the admission check's calibrated scales), if any
    kv_scales_sha256: str | None = None
    #: the unit pair of the multiple and the budget (``vllm BF16 engine / bf16 trainer``); None for
    #: budgets calibrated before the pair was named
    unit_pair: str | None = None
    #: ``breached at step S (run #J)`` once a run trained under the approval went above its
    #: budget; None in the approved file (its recorded sha256 is of the file without it)
    breached: str | None = None

    def fields(self) -> dict:
        """The provenance as a mapping for JSON / YAML exports; ``kv_scales_sha256``,
        ``unit_pair`` and ``breached`` only where set, so the files approved before they
        existed keep their bytes."""
        out = asdict(self)
        for late in ("kv_scales_sha256", "unit_pair", "breached"):
            if out[late] is None:
                del out[late]
        return out

    def line(self) -> str:
        unit = f" ({self.unit_pair})" if self.unit_pair else ""
        measured = f"{self.multiple:g}x BF16{unit}, " if self.multiple is not None else ""
        scales = f"; KV scales file sha256 {self.kv_scales_sha256}" if self.kv_scales_sha256 else ""
        breached = f"; {self.breached}" if self.breached else ""
        return (f"opdweb rollout config {self.config_hash} ({self.config_name}) for {self.checkpoint}; "
                f"approval #{self.approval_id} by {self.approved_by} at {self.approved_at}; "
                f"admission check #{self.admission_job_id}: {measured}{self.verdict}{scales}{breached}")


def refuse_if(target: str, problems: list[str]) -> None:
    """Raise :class:`NotExpressible` for ``target`` when there is any problem."""
    if problems:
        raise NotExpressible(target, problems)


def block_fp8_refusals(config: RolloutConfig, trainer: str) -> list[str]:
    """Where ``trainer``'s FP8 rollouts (128x128 block FP8 E4M3 weights, dynamic FP8
    activations: W8A8) are not ``config``'s quantization."""
    if config.weights == "bf16":
        return []
    problems = []
    if not (config.weights == "fp8_e4m3" and config.weight_scale == "block" and config.block_size == 128
            and config.activations == "fp8_e4m3"):
        problems.append(f"weights {config.weights} / weight_scale {config.weight_scale} / activations "
                        f"{config.activations}: {trainer} builds 128x128 block FP8 E4M3 weights with dynamic FP8 "
                        "activations (W8A8); admit weights fp8_e4m3, weight_scale block, block_size 128, "
                        "activations fp8_e4m3")
    return problems


def gpu_note(config: RolloutConfig, elsewhere: str) -> list[str]:
    """The GPUs an export of ``config`` with FP8 weights is valid on (every export an FP8
    W8A8 engine: Ada, Hopper and newer), and what ``elsewhere`` the trainer's engine runs on
    older GPUs; none for BF16 weights."""
    if gemm(config) != "w8a8":
        return []
    return [f"valid on {W8A8_GPUS} GPUs (FP8 W8A8 kernels, as admitted); on Ampere and older {elsewhere}"]


def nearest_engine(config: RolloutConfig, target: str, *, fp8: str, keeps_layers: bool, **changes) -> dict:
    """``config`` changed into the nearest engine ``target`` builds (the "admit for this
    trainer" starting point): FP8 weights as ``fp8`` ("tensor" W8A8 keeping per-channel
    scales, or "block" 128x128 W8A8), FP8 KV at scale 1.0 per tensor, no screening noise,
    ``keep_bf16`` kept only where the trainer can express it (``keeps_layers``), ``target`` named;
    then ``changes``."""
    data = config.model_dump(mode="json")
    if data["weights"] != "bf16":
        data["weights"], data["activations"] = "fp8_e4m3", "fp8_e4m3"
        if fp8 == "block":
            data["weight_scale"], data["block_size"] = "block", 128
        elif data["weight_scale"] == "block":
            data["weight_scale"] = "tensor"
    if data["kv_cache"] != "none":
        data["kv_scale"], data["kv_scales"] = "tensor", "unit"
    if not keeps_layers:
        data["keep_bf16"] = []
    data["noise_sigma"] = 0.0
    data["targets"] = sorted({*data["targets"], target})
    for key, value in changes.items():
        if isinstance(value, dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def comment_block(provenance: Provenance, target: str, notes: list[str]) -> list[str]:
    """The provenance line, the target trainer and ``notes`` as ``#`` comments, heading a
    text export (each one line whatever the names in it hold)."""
    return [comment(provenance.line()), comment(f"for {target}")] + [comment(f"note: {n}") for n in notes]
