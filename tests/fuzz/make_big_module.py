"""Writes a large, valid HLO module for memory and atomic-write checks.

  python tests/fuzz/make_big_module.py FIXTURE OUT TARGET_BYTES

Copies every computation of FIXTURE until the text reaches TARGET_BYTES; copy k
renames every %name to %name.rK. Copies of the ENTRY become ordinary
computations called from the ENTRY in turn (the real ENTRY stays as is), so
the module stays connected and verifies.
"""

import re
import sys


def main(argv):
  fixture, out, target = argv[1], argv[2], int(float(argv[3]))
  text = open(fixture).read()
  header, body = text.split("\n", 1)
  entry_match = re.search(r"^ENTRY %([\w.\-]+) \((.*?)\) -> (.*?) \{$", body, re.M)
  entry_name, entry_params, entry_result = entry_match.groups()
  entry_start = entry_match.start()
  entry_end = body.index("\n}\n", entry_start) + 3
  others, entry = body[:entry_start] + body[entry_end:], body[entry_start:entry_end]
  params = re.findall(r"^\s*%([\w.\-]+) = (\S+) parameter\((\d+)\)", entry, re.M)
  params.sort(key=lambda p: int(p[2]))
  token = re.compile(r"%([\w.\-]+)")
  chunks, size, k = [], len(text), 0
  while size < target:
    k += 1
    copy = token.sub(lambda m, k=k: f"%{m.group(1)}.r{k}", others + entry.replace("ENTRY ", "", 1))
    chunks.append(copy)
    size += len(copy)
  # The ENTRY calls every copy (results unused but kept alive in a tuple).
  lines = entry.rstrip("\n").split("\n")
  root_line = next(i for i, l in enumerate(lines) if l.lstrip().startswith("ROOT "))
  root = lines[root_line].replace("ROOT ", "", 1)
  root_name = re.match(r"\s*%([\w.\-]+) = (\S+|\(.*?\)) ", root)
  calls = []
  args = ", ".join(f"%{p[0]}" for p in params)
  for i in range(1, k + 1):
    calls.append(f"  %call.r{i} = {entry_result} call({args}), to_apply=%{entry_name}.r{i}")
  keep = ", ".join([f"%{root_name.group(1)}"] + [f"%call.r{i}" for i in range(1, k + 1)])
  shapes = ", ".join([entry_result] * (k + 1))
  new_entry = (
    "\n".join(
      lines[:root_line]
      + [root]
      + lines[root_line + 1 : -1]
      + calls
      + [f"  ROOT %keep_all = ({shapes}) tuple({keep})", "}"]
    )
    + "\n"
  )
  new_entry = new_entry.replace(f"-> {entry_result} {{", f"-> ({shapes}) {{", 1)
  header = re.sub(r", entry_computation_layout=\{.*?\}(?=, [a-z_]+=|$)", "", header)
  with open(out, "w") as f:
    f.write(header + "\n" + others + "".join(chunks) + new_entry)


if __name__ == "__main__":
  main(sys.argv)
