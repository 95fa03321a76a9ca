"""``tuner models`` and ``tuner gpus``: what the catalog knows."""

from __future__ import annotations

from rich.table import Table

from tuner.cli.common import JsonOpt, out, print_json


def models(as_json: JsonOpt = False) -> None:
    """List the catalogued models."""
    from tuner.catalog import MODELS
    from tuner.domain import to_jsonable

    if as_json:
        print_json(
            [
                {"alias": alias, **to_jsonable(m), "parameters": m.parameter_count()}
                for alias, m in MODELS.items()
            ]
        )
        return
    table = Table("alias", "hub id", "architecture", "layers", "params", "max len", "weights")
    for alias, m in MODELS.items():
        table.add_row(
            alias,
            m.hub_id,
            m.architecture,
            str(m.num_layers),
            _parameters(m.parameter_count()),
            str(m.max_position_embeddings),
            ("published" if m.weights_available else "none published")
            + (f" ({m.notes})" if m.notes else ""),
        )
    out.print(table)


def _parameters(count: int) -> str:
    """A parameter count in billions, or in millions below 0.1 B: 426,624 is 0.43 M (it read
    0.00 B)."""
    return f"{count / 1e9:.2f} B" if count >= 1e8 else f"{count / 1e6:.2f} M"


def gpus(as_json: JsonOpt = False) -> None:
    """List the GPU profiles."""
    from tuner.catalog import GPUS
    from tuner.domain import to_jsonable

    if as_json:
        print_json([{"name": name, **to_jsonable(g)} for name, g in GPUS.items()])
        return
    table = Table("name", "GPU", "memory", "sm", "attention backends", "kv dtypes")
    for name, g in GPUS.items():
        sm = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "-"
        table.add_row(
            name,
            g.display_name,
            f"{g.memory_gib:g} GiB",
            sm,
            ", ".join(g.attention_backends),
            ", ".join(g.kv_cache_dtypes),
        )
    out.print(table)
