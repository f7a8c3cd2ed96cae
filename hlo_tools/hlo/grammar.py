"""The HLO text's grammar: XLA's opcode names and the regexes that read lines and values."""

import re

# Opcode spellings of XLA's HloOpcodeString() (jaxlib 0.10.2's enum): a word outside
# them is a typo or garbage, not an instruction.
OPCODES = frozenset(
  """
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start
all-reduce all-reduce-done all-reduce-start all-to-all and asin asinh async-done async-start
async-update atan2 atanh batch-norm-grad batch-norm-inference batch-norm-training bitcast
bitcast-convert broadcast call cbrt ceil cholesky clamp collective-broadcast
collective-permute collective-permute-done collective-permute-start compare complex
concatenate conditional constant convert convolution copy copy-done copy-start cosine cosh
count-leading-zeros custom-call divide domain dot dynamic-reshape dynamic-slice
dynamic-update-slice erf exponential exponential-minus-one fft floor fusion gather
get-dimension-size get-tuple-element imag infeed iota is-finite log log-plus-one logistic
map maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter
partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce
reduce-precision reduce-scatter reduce-window remainder replica-id reshape reverse rng
rng-bit-generator rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt
scaled-dot scan scatter select select-and-scatter send send-done set-dimension-size
shift-left shift-right-arithmetic shift-right-logical sign sine sinh slice sort sqrt
stochastic-convert subtract tan tanh topk transpose triangular-solve tuple while xor
""".split()
)


def is_known_opcode(opcode: str) -> bool:
  """XLA's opcodes, and `{op}-start/-update/-done`: XLA's printed sugar for an async
  start/update/done wrapping the single instruction `op`."""
  return opcode in OPCODES or any(
    opcode.endswith(s) and opcode[: -len(s)] in OPCODES for s in ("-start", "-update", "-done")
  )


# Attributes whose value names computations.
CALL_ATTRS = frozenset(
  (
    "calls",
    "to_apply",
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
  )
)

# Regexes, compiled once; possessive quantifiers (Python 3.11+) keep them linear.

_STR = r'"(?:[^"\\\n]++|\\.)*+"'


def _nested(open_: str, close: str, depth: int) -> str:
  """A regex for text balanced in open_/close (strings minded) up to `depth` levels."""
  inner = r"[^%s%s\"\n]++|%s" % (open_, close, _STR)
  pat = r"\%s(?:%s)*+\%s" % (open_, inner, close)
  for _ in range(depth):
    pat = r"\%s(?:%s|%s)*+\%s" % (open_, inner, pat, close)
  return pat


_NAME = r"[A-Za-z_][\w.\-]*"
_ARRAY_SHAPE = r"[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\})?"
_TUPLE_SHAPE = _nested("(", ")", 8)
# jaxlib 0.10 prints replica groups as `mesh['a'=8,'b'=1] {'a'}`, maybe with
# `, device_ids=([4,2]T(1,0))` before the braces: a space and a comma inside a value.
_MESH = r"mesh\[[^\]\n]*\](?:, device_ids=\((?:[^()\n]++|\([^()\n]*\))*+\))?[ \t]*\{[^{}\n]*\}"
_BARE = r"(?:[^\s,{}\"()\[\]]++|\[[^\[\]\n]*+\]|\([^()\n]*+\))++"
_VALUE = r"(?:%s|%s|%s|%s)" % (_nested("{", "}", 10), _STR, _MESH, _BARE)
ATTR_RE = re.compile(r",[ \t]*(%s)=(%s)" % (_NAME, _VALUE))
# Groups: ROOT, name, shape, opcode, operands as `%a, %b` or else their text, attributes.
INSTR_RE = re.compile(
  r"[ \t]*(ROOT[ \t]+)?%%?(%s):?[ \t]*=[ \t]*(%s|%s)[ \t]+([a-z][a-z0-9\-]*)"
  r"\((?:(%%[\w.\-]++(?:, %%[\w.\-]++)*+)|([^()\"]*+))\)"
  r"((?:[ \t]*,[ \t]*%s=%s)*+)[ \t]*\Z" % (_NAME, _ARRAY_SHAPE, _TUPLE_SHAPE, _NAME, _VALUE)
)
HEAD_RE = re.compile(r"[ \t]*(ROOT[ \t]+)?(%%?)(%s)?:?[ \t]*(=?)[ \t]*" % _NAME)
# An operand may end in '#K' indices: a tuple element of the instruction named
# (XLA's compact get-tuple-element, which newer XLA prints: hlo_parser.cc:5706-5817
# at 183fa00c; jax 0.11.2's dumps carry it). The name keeps its '#K' suffixes.
OPERAND_RE = re.compile(
  r"[ \t]*(?:(?:%s|\([^%%]*\))[ \t]*)?%%?(%s(?:#\d+)*)[ \t]*\Z" % (_ARRAY_SHAPE, _NAME)
)
COMP_HEAD_RE = re.compile(
  r"[ \t]*(ENTRY[ \t]+)?%%?(%s)[ \t]*(\(.*\)[ \t]*->.*?)?[ \t]*\{[ \t]*\Z" % _NAME
)
MODULE_RE = re.compile(r"[ \t]*HloModule[ \t]+([\w.\-]+):?(.*)\Z")
CALL_RE = re.compile(r",[ \t]*(?:%s)=(\{[^{}\n]*\}|%%?[\w.\-]+)" % "|".join(sorted(CALL_ATTRS)))
TABLE_ROW_RE = re.compile(r"[ \t]*(\d+)[ \t]*(%s|\{[^{}\"]*\})[ \t]*\Z" % _STR)
CLOSE_RE = re.compile(r"[ \t]*\}[ \t]*(,.*)?\Z")
KV_RE = re.compile(r"([\w.\-]+)=\s*(" + _STR + r"|[^\s,\"]+)")
STR_OR_COMMENT_RE = re.compile(r"%s|/\*.*?\*/" % _STR)
WS_RE = re.compile(r"[ \t]*")
WS_COMMENTS_RE = re.compile(r"(?:\s++|/\*.*?\*/)*+")
SPECIAL_RE = re.compile(r'[(){}\[\]"]')
STR_RE = re.compile(_STR)
KEY_EQ_RE = re.compile(_NAME + "=")
OPCODE_RE = re.compile(r"[a-z][a-z0-9\-]*")
INT_RE = re.compile(r"-?\d+")
PAIRS_RE = re.compile(r"\{\s*(?:\{\s*\d+\s*,\s*\d+\s*\}(?:\s*,\s*\{\s*\d+\s*,\s*\d+\s*\})*)?\s*\}")
ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^{}]*\})?")
DIM_RE = re.compile(r"\s*(?:(\d+)|<=\s*(\d+)|(\?))\s*\Z")
NOT_UTF8_RE = re.compile("[\udc80-\udcff]")
ESCAPE_RE = re.compile(r"\\(.)", re.S)
IOTA_RE = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
MESH_RE = re.compile(
  r"mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\))?"
  r"\s*\{([^}]*)\}"
)


def match_end(rx: "re.Pattern[str]", text: str, i: int) -> int:
  """Where a pattern that matches the empty text too ends its match at text[i:]."""
  m = rx.match(text, i)
  return i if m is None else m.end()
