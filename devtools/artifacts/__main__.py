import sys
from pathlib import Path

from devtools.artifacts import generate

root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
for rel in generate(root):
    print(f"wrote {rel}")
