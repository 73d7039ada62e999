"""YAML for generated files: key order kept, long lines unfolded, strings quoted only where needed."""

from __future__ import annotations

import yaml


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)  # indent lists under their key, as kubectl does


def dump(data: object) -> str:
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 16, default_flow_style=False
    )
