"""Who this DDP rank is: torchrun's environment, the process group, the model's device and its NVML index.

Rank and world size come from the initialised process group when there is one (the truth), else from torchrun's
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK`` = node). A CUDA device is mapped to its NVML
index by UUID / PCI id (``ringscope.agent.devices.nvml_index_of_cuda_device``), never by CUDA index, because CUDA
renumbers devices under ``CUDA_VISIBLE_DEVICES``. Never raises for a missing reading: it becomes ``None``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ringscope.agent.devices import nvml_index_of_cuda_device


@dataclass(slots=True)
class RankIdentity:
    """One DDP rank's identity as the agent reports it."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int | None
    backend: str | None
    device: Any
    is_cuda: bool
    restart_count: int
    devices: list[dict[str, Any]] = field(default_factory=list)
    nvml_index: int | None = None


def rank_identity(ddp_model: Any) -> RankIdentity:
    """Read this rank's identity from the process group, torchrun's environment and ``ddp_model``'s device."""
    import torch.distributed as dist

    rank, world_size, backend = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), None
    if dist.is_available() and dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
        backend = str(dist.get_backend())
    device = _model_device(ddp_model)
    node = os.environ.get("GROUP_RANK")
    identity = RankIdentity(
        rank=rank,
        local_rank=_env_int("LOCAL_RANK", 0),
        world_size=world_size,
        node_rank=int(node) if node is not None and node.strip().isdigit() else None,
        backend=backend,
        device=device,
        is_cuda=getattr(device, "type", "cpu") == "cuda",
        restart_count=_env_int("TORCHELASTIC_RESTART_COUNT", 0),
    )
    identity.devices = [_describe_device(identity)]
    return identity


def _describe_device(identity: RankIdentity) -> dict[str, Any]:
    device = identity.device
    info: dict[str, Any] = {"kind": getattr(device, "type", "cpu"), "name": str(device)}
    if not identity.is_cuda:
        return info
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "") or None
    pci = _pci_of(props)
    identity.nvml_index = nvml_index_of_cuda_device(uuid, pci)
    info.update(
        cuda_index=index,
        name=str(props.name),
        uuid=uuid,
        nvml_index=identity.nvml_index,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        total_memory_bytes=int(props.total_memory),
    )
    if pci is not None:
        info["pci_bus_id"] = "{:08x}:{:02x}:{:02x}.0".format(*pci)
    return info


def _pci_of(props: Any) -> tuple[int, int, int] | None:
    """(domain, bus, device) from torch's device properties (newer torch only), else None."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(not isinstance(part, int) for part in parts):
        return None
    return parts[0], parts[1], parts[2]  # type: ignore[return-value]


def _model_device(ddp_model: Any) -> Any:
    import torch

    for param in ddp_model.parameters():
        return param.device
    return torch.device("cpu")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.lstrip("-").isdigit() else default
