"""Pure-Python reader for XLA HLO module text (as printed by jax 0.9 - 0.11).

No jaxlib needed. XLA prints one statement a line, and the first reading takes that
for granted: each instruction line is matched by one compiled regex (the fast path);
a line the regex rejects goes through a small exact scanner that either accepts it
(unusual but legal text) or raises HloParseError at the right column.

XLA's parser reads tokens, so a newline may stand wherever white space may. Text the
first reading refuses is read a second time, statement by statement: a statement goes
on while a bracket is open, a value is due, or the next line starts with anything but
a new statement (`,`, `{`, `<=`, ...); its lines are joined and read as one. That
reading's verdict is final. An error names the line and column of the offending token
(a value of the wrong form: where the value starts; an unclosed bracket: the bracket;
a missing attribute or operand: the instruction's first line or its name); an
instruction's `line` is that of its name.
"""

import bisect
import itertools
import json
import os
import re

from hlo_tools.cli_io import DEFAULT_MAX_INPUT_BYTES, InputReadError, one_line, read_input

__all__ = [
    "HloParseError", "Shape", "HloInstruction", "HloComputation", "HloModule",
    "parse_shape", "is_known_opcode", "parse_hlo_text", "parse_hlo_file", "load_hlo_proto", "OPCODES",
]


class HloParseError(ValueError):
  """A syntax error in HLO text; str() is `path:line:col: message`."""

  def __init__(self, path, line, col, message):
    message = one_line(message)  # one readable line even when it quotes huge text
    super().__init__(f"{one_line(path, 200)}:{line}:{col}: {message}")
    self.path, self.line, self.col, self.message = path, line, col, message

  def __reduce__(self):  # keep it picklable despite the 4-argument constructor
    return (HloParseError, (self.path, self.line, self.col, self.message))


# Opcode spellings of XLA's HloOpcodeString(); checked against jaxlib 0.10.2's parser.
OPCODES = frozenset("""
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
""".split())

_ASYNC_SUFFIXES = ("-start", "-update", "-done")


def is_known_opcode(opcode):
  """True for XLA opcodes and for the `{op}-start/-update/-done` spelling that XLA's
  printer uses for an async-start/update/done wrapping a single `op` (syntax sugar)."""
  if opcode in OPCODES:
    return True
  for suffix in _ASYNC_SUFFIXES:
    if opcode.endswith(suffix) and opcode[:-len(suffix)] in OPCODES:
      return True
  return False


# Bytes per element. Sub-byte types count one byte each, as XLA stores them unpacked
# unless the layout says otherwise.
_ELEMENT_BYTES = {
    "pred": 1, "s1": 1, "s2": 1, "s4": 1, "s8": 1, "u1": 1, "u2": 1, "u4": 1, "u8": 1,
    "f4e2m1fn": 1, "f8e3m4": 1, "f8e4m3": 1, "f8e4m3fn": 1, "f8e4m3b11fnuz": 1,
    "f8e4m3fnuz": 1, "f8e5m2": 1, "f8e5m2fnuz": 1, "f8e8m0fnu": 1,
    "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
    "f32": 4, "s32": 4, "u32": 4,
    "f64": 8, "s64": 8, "u64": 8, "c64": 8,
    "c128": 16,
    "token": 0, "opaque": 0,
}

# Attributes whose value names computations.
_CALL_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
               "true_computation", "false_computation")
_CALL_ATTR_SET = frozenset(_CALL_ATTRS)

# ---------------------------------------------------------------------------------------
# Regexes, compiled once. Python's possessive quantifiers (3.11+) keep them linear.

_STR = r'"(?:[^"\\]++|\\.)*+"'


def _nested(open_, close, body_extra, depth):
  """A regex for text balanced in open_/close up to `depth` levels (no recursion in re)."""
  inner = r"[^%s%s\"]++|%s" % (open_, close, _STR) if body_extra else r"[^%s%s]++" % (open_, close)
  pat = r"\%s(?:%s)*+\%s" % (open_, inner, close)
  for _ in range(depth):
    pat = r"\%s(?:%s|%s)*+\%s" % (open_, inner, pat, close)
  return pat


_BRACES = _nested("{", "}", True, 10)
_ARRAY_SHAPE = r"[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\})?"
_TUPLE_SHAPE = _nested("(", ")", False, 8)
_BARE = r"(?:[^\s,{}\"()\[\]]++|\[[^\[\]]*+\]|\([^()]*+\))++"
_VALUE = r"(?:%s|%s|%s)" % (_BRACES, _STR, _BARE)

_INSTR_HEAD_RE = re.compile(
    r"[ \t]*(?:ROOT[ \t]+)?%?[A-Za-z_][\w.\-]*[ \t]*=[ \t]*"
    r"(?:" + _ARRAY_SHAPE + "|" + _TUPLE_SHAPE + r")[ \t]+[a-z][a-z0-9\-]*\([^()\"]*+\)")
_INSTR_RE = re.compile(
    r"[ \t]*(ROOT[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*"
    r"(" + _ARRAY_SHAPE + "|" + _TUPLE_SHAPE + r")[ \t]+"
    r"([a-z][a-z0-9\-]*)\(([^()\"]*+)\)(.*)")
_OPERAND = (r"(?:/\*.*?\*/\s*)*(?:(?:%s|%s)\s*)?%%?[A-Za-z_][\w.\-]*"
            % (_ARRAY_SHAPE, _TUPLE_SHAPE))
# XLA takes empty operands between commas too: `(%a,, %b,)`.
_OPERANDS_RE = re.compile(r"\s*(?:%s)?(?:\s*,\s*(?:%s)?)*\s*" % (_OPERAND, _OPERAND))
# The usual spelling, `%a, %b` (XLA's /*index=5*/ comments are blank by now), checked
# first because it is cheap.
_SIMPLE_OPERANDS_RE = re.compile(r"%[\w.\-]+(?:, *+%[\w.\-]+)*+")
_ATTR_RE = re.compile(r"(,[ \t]*([A-Za-z_][\w.\-]*)=(" + _VALUE + "))")
_PCT_NAME_RE = re.compile(r"%([\w.\-]+)")
_ATTR_RUN_RE = re.compile(r"(?:[ \t]*,[ \t]*[A-Za-z_][\w.\-]*=%s)*+" % _VALUE)
# A '{' after the dims starts a layout when an integer or ':' follows (XLA's rule).
_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\s*\[([^\]]*)\](?:\s*(\{(?=\s*[-\d:])[^{}]*\}))?")
_COMMENT_RE = re.compile(r"/\*.*?\*/")
_NAME_RE = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_KEY_RE = re.compile(r"[A-Za-z_][\w.\-]*")
_OPCODE_RE = re.compile(r"[a-z][a-z0-9\-]*")
_WS_RE = re.compile(r"(?:\s++|/\*.*?\*/)*+")
_STR_RE = re.compile(_STR)
_SPECIAL_RE = re.compile(r'[(){}\[\]"]')
# re.S: a statement joined from several lines may hold a string with a raw newline.
_COMP_HEAD_RE = re.compile(r"(ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*(.*?)[ \t]*\{\s*\Z",
                           re.S)
_MODULE_RE = re.compile(r"\s*HloModule[ \t]+([\w.\-]+):?(.*)\Z", re.S)
# A table row: a number, then a string or {key=value ...}; one a line (split=False).
_TABLE_ITEM_RE = re.compile(r"\s*(\d+)\s*(%s|\{[^{}\"]*\})" % _STR)
_TABLE_ROW_RE = re.compile(_TABLE_ITEM_RE.pattern + r"\s*\Z")
_KV_RE = re.compile(r"([\w.\-]+)=\s*(" + _STR + r"|[^\s,\"]+)")
_IOTA_VALUE_RE = re.compile(r"\[[\d,\s]*\]\s*<=\s*\[[\d,\s]*\](?:\s*T\s*\([\d,\s]*\))?")
_IOTA_RE = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
# A computation's signature whose parameters nest no brackets beyond [dims] and {layout}.
_SIGNATURE_RE = re.compile(r"\((?:[^()\[\]{}\"/]++|\[[^()\[\]{}\"/]*\]|\{[^()\[\]{}\"/]*\})*\)"
                           r"[ \t]*->[ \t]*(\S(?:.*\S)?)[ \t]*\Z", re.S)
_CLOSE_RE = re.compile(r"\s*\}\s*(?:,(.*))?\Z", re.S)
_INT_VALUE_RE = re.compile(r"-?\d+")
_MODULE_INT_ATTRS = ("num_partitions", "replica_count")
_MODULE_ATTRS = frozenset((
    "alias_passthrough_params allow_spmd_sharding_propagation_to_output "
    "allow_spmd_sharding_propagation_to_parameters buffer_donor entry_computation_layout "
    "frontend_attributes input_output_alias is_scheduled num_partitions "
    "origin_recovery_table replica_count").split())

_PERMUTE_OPCODES = frozenset(("collective-permute", "collective-permute-start"))
_GOOD_PAIRS = set()  # pair lists already seen to repeat no id
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_CLOSERS = {"(": ")", "{": "}", "[": "]"}


# ---------------------------------------------------------------------------------------
# Attribute names each opcode takes, and the form of typed values: XLA's parser rejects
# any other name and a value of the wrong form. Names read off XLA's HloParser.

_COMMON_ATTRS = ("sharding frontend_attributes statistics parameter_replication "
                 "control-predecessors origin metadata backend_config")

_OPCODE_ATTRS_SPEC = {
    "iota": "iota_dimension", "topk": "k largest",
    "acos acosh asin asinh atanh exponential-minus-one log log-plus-one logistic sqrt "
    "cbrt rsqrt tanh erf sine sinh cosine cosh tan exponential": "result_accuracy",
    "all-gather all-gather-start":
        "replica_groups channel_id dimensions constrain_layout use_global_device_ids",
    "all-reduce all-reduce-start reduce-scatter":
        "to_apply replica_groups channel_id constrain_layout use_global_device_ids mode "
        "dimensions",
    "all-to-all": "replica_groups channel_id dimensions constrain_layout",
    "ragged-all-to-all": "replica_groups channel_id dimensions",
    "collective-broadcast": "replica_groups channel_id",
    "collective-permute collective-permute-start":
        "source_target_pairs channel_id slice_sizes",
    "async-start": "async_execution_thread output_to_operand_aliasing calls",
    "async-update async-done": "async_execution_thread calls",
    "copy-start": "cross_program_prefetch_index",
    "reshape": "inferred_dimension", "sort": "dimensions is_stable to_apply",
    "while": "condition body", "recv recv-done send send-done": "channel_id is_host_transfer",
    "get-tuple-element": "index", "call": "to_apply is_composite",
    "reduce-window": "window to_apply",
    "convolution": "window dim_labels feature_group_count batch_group_count conv_kind "
                   "operand_precision",
    "fft": "fft_type fft_length",
    "triangular-solve": "left_side lower unit_diagonal transpose_a",
    "compare": "direction type", "cholesky": "lower",
    "broadcast concatenate reverse transpose get-dimension-size set-dimension-size":
        "dimensions",
    "map": "to_apply dimensions", "reduce": "to_apply dimensions",
    "scan": "to_apply dimensions num_carries is_reverse is_associative",
    "select-and-scatter": "select scatter window", "slice": "slice",
    "dynamic-slice": "dynamic_slice_sizes",
    "batch-norm-training batch-norm-inference batch-norm-grad": "epsilon feature_index",
    "pad": "padding", "fusion": "calls kind output_to_operand_aliasing",
    "infeed": "infeed_config", "outfeed": "outfeed_config outfeed_shape",
    "rng": "distribution", "rng-get-and-update-state": "delta",
    "rng-bit-generator": "algorithm", "reduce-precision": "exponent_bits mantissa_bits",
    "conditional": "true_computation false_computation branch_computations",
    "custom-call": "custom_call_target window dim_labels feature_group_count "
                   "batch_group_count operand_layout_constraints custom_call_has_side_effect "
                   "to_apply called_computations output_to_operand_aliasing padding_type "
                   "literal operand_precision schedule api_version",
    "dot scaled-dot": "lhs_contracting_dims rhs_contracting_dims lhs_batch_dims "
                      "rhs_batch_dims operand_precision algorithm",
    "ragged-dot": "lhs_contracting_dims rhs_contracting_dims lhs_batch_dims rhs_batch_dims "
                  "lhs_ragged_dims rhs_group_dims operand_precision",
    "gather": "offset_dims collapsed_slice_dims start_index_map index_vector_dim slice_sizes "
              "indices_are_sorted operand_batching_dims start_indices_batching_dims",
    "scatter": "update_window_dims inserted_window_dims scatter_dims_to_operand_dims "
               "index_vector_dim to_apply indices_are_sorted unique_indices "
               "input_batching_dims scatter_indices_batching_dims",
    "domain": "domain",
}

# Attributes without which XLA's parser refuses the instruction.
_REQUIRED_ATTRS_SPEC = {
    "iota": "iota_dimension", "topk": "k", "all-gather all-gather-start": "dimensions",
    "all-reduce all-reduce-start reduce-scatter": "to_apply",
    "collective-permute collective-permute-start": "source_target_pairs",
    "async-start": "calls", "sort": "dimensions to_apply", "while": "condition body",
    "get-tuple-element": "index", "call": "to_apply", "reduce-window": "to_apply",
    "convolution": "dim_labels", "fft": "fft_type fft_length", "compare": "direction",
    "concatenate reverse transpose get-dimension-size set-dimension-size": "dimensions",
    "map": "to_apply", "reduce": "to_apply dimensions",
    "scan": "to_apply dimensions num_carries", "select-and-scatter": "select scatter",
    "slice": "slice", "dynamic-slice": "dynamic_slice_sizes",
    "batch-norm-training batch-norm-inference batch-norm-grad": "epsilon feature_index",
    "pad": "padding", "fusion": "calls kind", "rng": "distribution",
    "rng-get-and-update-state": "delta", "rng-bit-generator": "algorithm",
    "reduce-precision": "exponent_bits mantissa_bits", "custom-call": "custom_call_target",
    "gather": "offset_dims start_index_map index_vector_dim slice_sizes",
    "scatter": "scatter_dims_to_operand_dims index_vector_dim to_apply", "domain": "domain",
}


# Operand counts XLA's parser insists on (opcodes with a fixed count only).
_OPERAND_COUNT_SPEC = {
    0: "iota replica-id partition-id rng-get-and-update-state",
    1: "topk acos acosh asin asinh atanh exponential-minus-one log log-plus-one logistic "
       "sqrt cbrt rsqrt tanh erf sine sinh cosine cosh tan exponential abs all-gather-done "
       "all-reduce-done round-nearest-afz round-nearest-even bitcast ceil "
       "count-leading-zeros collective-permute-done copy copy-done opt-barrier imag "
       "is-finite floor not negate popcnt real sign convert bitcast-convert copy-start "
       "reshape while recv recv-done send-done get-tuple-element fft cholesky broadcast "
       "reverse slice transpose infeed reduce-precision domain get-dimension-size",
    2: "add divide multiply subtract atan2 complex maximum minimum power remainder and or "
       "xor shift-left shift-right-arithmetic shift-right-logical stochastic-convert "
       "add-dependency send convolution triangular-solve compare pad outfeed gather "
       "set-dimension-size",
    3: "clamp select select-and-scatter batch-norm-training",
    5: "batch-norm-inference batch-norm-grad",
}
_OPERAND_COUNTS = {op: n for n, ops in _OPERAND_COUNT_SPEC.items() for op in ops.split()}
_MIN_OPERANDS = _DYNAMIC_SLICES = {"dynamic-slice": 1, "dynamic-update-slice": 2}
_FINISH_OPCODES = frozenset(("parameter", "broadcast", *_DYNAMIC_SLICES))
_ARITY_OPCODES = frozenset(("tuple", *_OPERAND_COUNTS, *_MIN_OPERANDS))
_LITERAL_OPCODES = frozenset(("constant", "parameter"))

# metadata={...}: its fields and their value forms.
_META_FIELDS = {
    **{k: "str" for k in "op_type op_name source_file deduplicated_name scheduling_name".split()},
    **{k: "int32" for k in
       "source_line source_end_line source_column source_end_column stack_frame_id".split()},
    "profile_type": "list", "metadata_payload": "any",
}
# XLA takes a comma before each field, not after the last; `name=` is one token.
_META_ITEM_RE = re.compile(r'\s*,?\s*([A-Za-z_][\w\-]*)=\s*(%s|-?\d+|\{[^{}]*\})' % _STR)
_META_FORMS = {"str": re.compile(_STR), "int32": re.compile(r"-?\d{1,10}"),
               "list": re.compile(r"\{\s*(?:-?\d+(?:\s*,\s*-?\d+)*)?\s*\}"),
               "any": re.compile(r".*", re.S)}


def _meta_item_pattern():
  by_form = {}
  for key, form in _META_FIELDS.items():
    by_form.setdefault(form, []).append(key)
  forms = {"str": _STR, "int32": r"-?\d{1,9}", "list": _META_FORMS["list"].pattern,
           "any": r"(?:%s|-?\d+|\{[^{}]*\})" % _STR}
  return "|".join(r"(?:(?:%s)=\s*%s)" % ("|".join(keys), forms[form])
                  for form, keys in by_form.items())


# The common case in one pass: every field known, of its form, ints of 9 digits or less.
_META_FAST_RE = re.compile(r"\{(?:\s*+,?\s*+(?:%s))*+\s*+\}" % _meta_item_pattern())
# Field names of text that _META_FAST_RE accepted (strings skipped whole).
_META_KEYS_RE = re.compile(r'([A-Za-z_][\w\-]*)=\s*(?:%s|[^\s,{}"]*|\{[^{}]*\})' % _STR)


# Fields in the order XLA prints them, each at most once: no duplicate to look for.
# Written for speed (every instruction has metadata); anything else takes the long way.
_META_PRINTED_RE = re.compile(r"\{%s *\}" % "".join(
    r"(?: *,? *%s=%s)?" % (key, {"str": r'"[^"\\]*(?:\\.[^"\\]*)*"', "int32": r"-?\d{1,9}",
                               "list": r"\{[\d, \-]*\}"}[_META_FIELDS[key]])
    for key in ("op_type op_name source_file source_line source_end_line source_column "
                "source_end_column profile_type deduplicated_name scheduling_name "
                "stack_frame_id").split()))


# One pass over the whole text: a metadata={...} that is not in the printed form (or
# "metadata=" inside some string). None found: no instruction's metadata needs a look.
_UNUSUAL_METADATA_RE = re.compile(r"metadata=(?!%s(?:[,}\s]|\Z))" % _META_PRINTED_RE.pattern)


def _metadata_problem(value):
  """Why XLA's parser would refuse this metadata={...} text, or None."""
  if _META_PRINTED_RE.fullmatch(value):
    return None
  if _META_FAST_RE.fullmatch(value):
    equals = value.count("=")
    if equals < 2:
      return None
    if equals == 2:  # two fields (or one with '=' in its string): differ unless repeated
      first = value[1:value.index("=")].lstrip(" ,\t")
      if value.count(first + "=") == 1:
        return None
    keys = _META_KEYS_RE.findall(value)
    if len(set(keys)) == len(keys):
      return None
  return _metadata_problem_slow(value)


def _metadata_problem_slow(value):
  if not (value.startswith("{") and value.endswith("}")):
    return "metadata must be {field=value ...}"
  body, i, seen = value[1:-1], 0, set()
  while i < len(body):
    m = _META_ITEM_RE.match(body, i)
    if m is None:
      if body[i:].strip():
        return f"bad metadata text {body[i:i + 30]!r}"
      break
    key, item = m.groups()
    form = _META_FIELDS.get(key)
    if form is None:
      return f"metadata has no field {key!r}"
    if key in seen:
      return f"metadata field {key!r} twice"
    seen.add(key)
    if not _META_FORMS[form].fullmatch(item) or (
        form == "int32" and not -(1 << 31) <= int(item) < (1 << 31)):
      return f"bad value for metadata field {key!r}: {item[:40]!r}"
    i = m.end()
  return None


def _expand_spec(spec, base=""):
  table = {}
  for ops, names in spec.items():
    for op in ops.split():
      table[op] = frozenset((base + " " + names).split())
  return table


_OPCODE_ATTRS = _expand_spec(_OPCODE_ATTRS_SPEC, _COMMON_ATTRS)
_REQUIRED_ATTRS = _expand_spec(_REQUIRED_ATTRS_SPEC)
_PLAIN_ATTRS = frozenset(_COMMON_ATTRS.split())

_INT = r"-?\d+"
_INT_LIST = r"\{\s*(?:-?\d+(?:\s*,\s*-?\d+)*)?\s*\}"
_NAME = r"%?[A-Za-z_][\w.\-]*"
# Value forms by attribute name (names whose form is the same for every opcode).
_VALUE_FORMS = {
    **{k: re.compile(_INT) for k in (
        "channel_id index iota_dimension k feature_group_count batch_group_count "
        "inferred_dimension cross_program_prefetch_index index_vector_dim num_carries delta "
        "exponent_bits mantissa_bits feature_index").split()},
    **{k: re.compile("true|false") for k in (
        "constrain_layout use_global_device_ids is_stable is_host_transfer is_composite "
        "largest custom_call_has_side_effect indices_are_sorted unique_indices is_reverse "
        "is_associative left_side lower unit_diagonal").split()},
    **{k: re.compile(_INT_LIST) for k in (
        "fft_length lhs_contracting_dims rhs_contracting_dims lhs_batch_dims rhs_batch_dims "
        "lhs_ragged_dims rhs_group_dims offset_dims collapsed_slice_dims start_index_map "
        "operand_batching_dims start_indices_batching_dims update_window_dims "
        "inserted_window_dims scatter_dims_to_operand_dims input_batching_dims "
        "scatter_indices_batching_dims dynamic_slice_sizes").split()},
    **{k: re.compile(_NAME) for k in (
        "to_apply body condition select scatter true_computation false_computation").split()},
    **{k: re.compile(_STR) for k in (
        "custom_call_target async_execution_thread infeed_config outfeed_config").split()},
    "kind": re.compile("kLoop|kInput|kOutput|kCustom"),
    "direction": re.compile("EQ|NE|GE|GT|LE|LT"),
    "type": re.compile("FLOAT|TOTALORDER|SIGNED|UNSIGNED"),
    "source_target_pairs": re.compile(
        r"\{\s*(?:\{\s*-?\d+\s*,\s*-?\d+\s*\}(?:\s*,\s*\{\s*-?\d+\s*,\s*-?\d+\s*\})*)?\s*\}"),
    "calls": re.compile(r"%s|\{\s*(?:%s(?:\s*,\s*%s)*)?\s*\}" % (_NAME, _NAME, _NAME)),
    "branch_computations": re.compile(r"\{\s*(?:%s(?:\s*,\s*%s)*)?\s*\}" % (_NAME, _NAME)),
}
_INTS = r"\s*-?\d+(?:\s*,\s*-?\d+)*\s*"
_SHARDING_ITEM = (
    r"(?:maximal|replicated|manual|unknown|unreduced|last_tile_dim_replicate"
    r"|device=\s*-?\d+|devices=\s*\[%s\](?:\s*<=\s*\[%s\](?:\s*T\s*\(%s\))?|\s*%s)"
    r"|metadata=\s*\{(?:[^{}\"]|%s)*\}|last_tile_dims=\s*\{[^{}]*\}|shard_as\s+\d+"
    r"|shard_like\s+\d+)" % (_INTS, _INTS, _INTS, _INTS, _STR))
_SINGLE_SHARDING = r"\{\s*(?:%s\s*,?\s*)*\}" % _SHARDING_ITEM
# A tuple sharding: XLA's printer puts /*index=N*/ before every fifth element.
_SHARDING_RE = re.compile(r"%s|\{\s*(?:%s(?:\s*,\s*(?:/\*index=\d+\*/\s*)?%s)*)?\s*\}"
                          r"|\{\s*(?:maximal_)?mesh\b.*"
                          % (_SINGLE_SHARDING, _SINGLE_SHARDING, _SINGLE_SHARDING), re.S)
_SLICE_SIZES_LISTS = re.compile(r"\{\s*(?:%s(?:\s*,\s*%s)*)?\s*\}" % (_INT_LIST, _INT_LIST))
_VALUE_FORMS["dimensions"] = _VALUE_FORMS["fft_length"]
# name="string" or name={raw text}, comma-separated, nothing else.
_FA_ITEM = r"[A-Za-z_][\w.\-]*=\s*(?:%s|%s)" % (_STR, _BRACES)
_VALUE_FORMS["frontend_attributes"] = re.compile(
    r"\{\s*(?:%s(?:\s*,\s*%s)*)?\s*\}" % (_FA_ITEM, _FA_ITEM))
_VALUE_FORMS["sharding"] = _SHARDING_RE


def _value_form(opcode, key):
  """The regex a value of `key` must match in full, or None when not checked."""
  if key == "slice_sizes" and opcode != "gather":  # collective-permute: list of lists
    return _SLICE_SIZES_LISTS
  return _VALUE_FORMS.get(key)


_ATTR_FORMS = {}  # opcode -> {allowed name: value regex or None}, filled as met
_GOOD_VALUES = set()  # (value regex, value) pairs already checked
_UNKNOWN = object()


def _allowed_attrs(opcode):
  allowed = _OPCODE_ATTRS.get(opcode)
  if allowed is not None:
    return allowed
  for suffix in _ASYNC_SUFFIXES:  # `{op}-start` sugar: op's own plus the async ones
    if opcode.endswith(suffix) and opcode not in OPCODES:
      base = opcode[:-len(suffix)]
      return (_OPCODE_ATTRS.get(base, _PLAIN_ATTRS) | _OPCODE_ATTRS["async-start"]
              | _OPCODE_ATTRS["async-update"])
  return _PLAIN_ATTRS


# ---------------------------------------------------------------------------------------
# Shapes

class Shape:
  """An array shape (element type, dims, layout text) or a tuple of shapes."""

  __slots__ = ("element_type", "dims", "dynamic", "layout", "tuple_shapes")

  def __init__(self, element_type=None, dims=(), layout=None, tuple_shapes=None,
               dynamic=None):
    self.element_type = element_type  # None for tuples
    self.dims = tuple(dims)  # a `?` (unbounded) dim is -1; `<=N` is N, flagged in dynamic
    self.dynamic = dynamic  # tuple of bools, or None when all dims are static
    self.layout = layout  # e.g. "{1,0:S(1)}", or None when not printed
    self.tuple_shapes = tuple_shapes  # tuple of Shape for tuples, else None

  @property
  def is_tuple(self):
    return self.tuple_shapes is not None

  @property
  def memory_space(self):
    """The layout's S(n) memory space (0 = default device memory)."""
    if not self.layout:
      return 0
    m = re.search(r"S\((\d+)\)", self.layout)
    return int(m.group(1)) if m else 0

  @property
  def minor_to_major(self):
    if not self.layout or len(self.layout) < 2:
      return None
    body = self.layout[1:-1].split(":", 1)[0]
    return tuple(int(d) for d in body.split(",") if d.strip())

  def leaves(self):
    """Array shapes in order, flattening nested tuples (no recursion: see MAX_SHAPE_DEPTH)."""
    stack = [self]
    while stack:
      shape = stack.pop()
      if shape.tuple_shapes is None:
        yield shape
      else:
        stack.extend(reversed(shape.tuple_shapes))

  def num_elements(self):
    n = 1
    for d in self.dims:
      n *= max(d, 0)
    return n

  def byte_size(self):
    if self.tuple_shapes is not None:
      return sum(s.byte_size() for s in self.leaves())
    return _ELEMENT_BYTES[self.element_type] * self.num_elements()

  def to_string(self, layout=True):
    if self.tuple_shapes is None:
      return self._array_string(layout)
    out = []
    stack = [self]  # shapes still to print, and the punctuation between them
    while stack:
      item = stack.pop()
      if isinstance(item, str):
        out.append(item)
      elif item.tuple_shapes is None:
        out.append(item._array_string(layout))
      else:
        stack.append(")")
        for k in range(len(item.tuple_shapes) - 1, -1, -1):
          stack.append(item.tuple_shapes[k])
          if k:
            stack.append(", ")
        stack.append("(")
    return "".join(out)

  def _array_string(self, layout):
    dims = []
    for i, d in enumerate(self.dims):
      if d < 0:
        dims.append("?")
      elif self.dynamic and self.dynamic[i]:
        dims.append(f"<={d}")
      else:
        dims.append(str(d))
    text = f"{self.element_type}[{','.join(dims)}]"
    return text + (self.layout or "") if layout else text

  __str__ = to_string

  def __repr__(self):
    return f"Shape({self.to_string()!r})"

  def __eq__(self, other):
    return isinstance(other, Shape) and self.to_string() == other.to_string()

  def __hash__(self):
    return hash(self.to_string())


class _ShapeError(ValueError):
  def __init__(self, message, offset):
    super().__init__(message)
    self.offset = offset


_SHAPE_CACHE = {}


def parse_shape(text):
  """Parses a shape's text; raises ValueError on bad syntax. Results are shared."""
  shape = _SHAPE_CACHE.get(text)
  if shape is None:
    shape, end = _parse_shape_at(text, _skip_ws(text, 0))
    end = _skip_ws(text, end)
    if end != len(text):
      raise _ShapeError(f"unexpected {text[end:end + 10]!r} after shape", end)
    if len(_SHAPE_CACHE) < 100000:
      _SHAPE_CACHE[text] = shape
  return shape


def _skip_ws(text, i):
  return _WS_RE.match(text, i).end()


# Deepest tuple nesting the reader accepts. XLA's parser recurses per level and dies
# of stack overflow near 10,000, so nvshmem-opt refuses text nested deeper than 512
# levels (brackets of any kind). An instruction's array shape sits inside its
# computation's braces and has its own '[', so 510 tuple levels here make both tools
# draw the line at the same module. Real modules nest a handful.
MAX_SHAPE_DEPTH = 510


def _parse_shape_at(text, i):
  """One shape at text[i:], without recursion (tuples may nest MAX_SHAPE_DEPTH deep)."""
  open_tuples = []  # elements read so far, one list per unclosed '('
  while True:
    i = _skip_ws(text, i)
    if text.startswith("(", i):
      if len(open_tuples) >= MAX_SHAPE_DEPTH:
        raise _ShapeError(f"tuple shape nests deeper than {MAX_SHAPE_DEPTH} levels", i)
      i = _skip_ws(text, i + 1)
      if not text.startswith(")", i):
        open_tuples.append([])
        continue
      shape, i = Shape(tuple_shapes=()), i + 1
    else:
      shape, i = _parse_array_shape_at(text, i, bool(open_tuples))
    while open_tuples:  # attach the shape just read; close finished tuples
      open_tuples[-1].append(shape)
      i = _skip_ws(text, i)
      if text.startswith(",", i):
        i += 1
        break
      if not text.startswith(")", i):
        raise _ShapeError("expected ',' or ')' in tuple shape", i)
      shape, i = Shape(tuple_shapes=tuple(open_tuples.pop())), i + 1
    else:
      return shape, i


_INT64_LIMIT = 1 << 63


def _ints_fit(text):
  """False when a number in text is too large for XLA's int64 tokens."""
  return len(text) < 19 or all(int(n) < _INT64_LIMIT for n in _BIG_INT_RE.findall(text))


_DIM_RE = re.compile(r"\s*(?:(\d+)|<=\s*(\d+)|(\?))\s*\Z")
# A layout as XLA's parser reads it: minor_to_major, then in this order the optional
# dim level types, tiles, tail padding, index and pointer types, element size, memory
# space, split configs, physical shape and metadata prefix.
_LAYOUT_RE = re.compile(
    r"\{\s*(?:-?\d+(?:\s*,\s*-?\d+)*)?\s*(?::\s*"
    r"(?:D\s*\([A-Za-z+~,\s]*\)\s*)?(?:T(?:\s*\([\d*,\s]*\))+\s*)?(?:L%s)?"
    r"(?:#\s*\(\s*[a-z][a-z0-9]*\s*\)\s*)?(?:\*\s*\(\s*[a-z][a-z0-9]*\s*\)\s*)?(?:E%s)?"
    r"(?:S%s)?(?:SC\s*\([\d:,\s]*\)\s*)*(?:P\s*\([^{}]*\)\s*)?(?:M%s)?)?\}"
    % ((r"\s*\(\s*\d+\s*\)\s*",) * 4))  # white space between any two tokens (XLA)
_LAYOUT_DIMS_RE = re.compile(r"\{\s*([\d,\s\-]*)")
_BIG_INT_RE = re.compile(r"\d{19,}")  # may not fit in int64: checked exactly


def _parse_array_shape_at(text, i, in_tuple=False):
  m = _ARRAY_RE.match(text, i)
  if m is None:
    raise _ShapeError(f"unknown shape syntax {text[i:i + 20]!r}", i)
  etype, dims_text, layout = m.groups()
  if etype not in _ELEMENT_BYTES:
    raise _ShapeError(f"unknown element type {etype!r}", i)
  dims, dynamic = [], []
  for d in dims_text.split(",") if dims_text.strip() else ():
    dm = _DIM_RE.match(d)
    if dm is None:
      raise _ShapeError(f"bad dimension {d.strip()[:20]!r}", m.start(2))
    exact, bound, unbounded = dm.groups()
    size = int(exact or bound) if not unbounded else -1
    if size >= _INT64_LIMIT:
      raise _ShapeError(f"dimension {size} does not fit in 64 bits", m.start(2))
    dims.append(size)
    dynamic.append(exact is None)
  if layout is not None:
    _check_layout(layout, len(dims), m.start(3), in_tuple)
    if not layout.isprintable() or " " in layout:  # as printed: {1,0}, not {1, 0}
      layout = "".join(layout.split())
  return (Shape(etype, dims, layout, None, tuple(dynamic) if any(dynamic) else None),
          m.end())


def _check_layout(layout, rank, at, in_tuple=False):
  """XLA's parser checks a layout's syntax and length; inside a tuple shape also that
  it orders each dimension once (building the tuple validates its elements)."""
  if not _LAYOUT_RE.fullmatch(layout) or not _ints_fit(layout):
    raise _ShapeError(f"malformed layout {layout[:40]!r}", at)
  order = [d.strip() for d in _LAYOUT_DIMS_RE.match(layout).group(1).split(",") if d.strip()]
  if len(order) != rank:
    raise _ShapeError(f"layout {layout[:40]!r} orders {len(order)} dimensions, the shape has "
                      f"{rank}", at)
  if in_tuple and sorted(order, key=int) != [str(d) for d in range(rank)]:
    raise _ShapeError(f"layout {layout[:40]!r} is not a permutation of the dimensions", at)


# ---------------------------------------------------------------------------------------
# Attribute value helpers (parsed on demand; the raw text is always kept)

def _unquote(text):
  """The value of a quoted HLO string (C escapes), or the text itself if not quoted."""
  if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
    body = text[1:-1]
    if "\\" not in body:
      return body
    out = bytearray()
    i = 0
    while i < len(body):
      ch = body[i]
      if ch != "\\" or i + 1 == len(body):
        out += ch.encode("utf-8")
        i += 1
        continue
      nxt = body[i + 1]
      if nxt in _C_ESCAPES:
        out.append(_C_ESCAPES[nxt])
        i += 2
      elif nxt == "x" and _HEX_RE.match(body, i + 2):
        m = _HEX_RE.match(body, i + 2)
        out.append(int(m.group(), 16) & 0xFF)
        i = m.end()
      elif nxt in "01234567":
        m = _OCT_RE.match(body, i + 1)
        out.append(int(m.group(), 8) & 0xFF)
        i = m.end()
      else:  # Unknown escape: keep the character, as C compilers do.
        out += nxt.encode("utf-8")
        i += 2
    return out.decode("utf-8", "replace")
  return text


_C_ESCAPES = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8,
              "f": 12, "v": 11, "?": 63}
_HEX_RE = re.compile(r"[0-9A-Fa-f]{1,2}")
_OCT_RE = re.compile(r"[0-7]{1,3}")


def _parse_kv(text):
  """`{a="x" b=1, c=2}` -> {'a': 'x', 'b': '1', 'c': '2'} (values unquoted)."""
  if text.startswith("{") and text.endswith("}"):
    text = text[1:-1]
  return {k: _unquote(v) for k, v in _KV_RE.findall(text)}


def _parse_name_list(text):
  """`%a` or `{%a, %b}` -> ['a', 'b']."""
  text = text.strip()
  if text.startswith("{"):
    text = text[1:-1]
  return [n.strip().lstrip("%") for n in text.split(",") if n.strip()]


def _parse_int_lists(text):
  """`{{0,1},{1,0}}` -> [[0, 1], [1, 0]]."""
  return [[int(x) for x in re.findall(r"-?\d+", g)] for g in re.findall(r"\{([^{}]*)\}", text)]


def _expand_iota(text):
  """Expands `[G,S]<=[d0,d1,...]T(perm)` replica groups; None if not in that form."""
  m = _IOTA_RE.fullmatch(re.sub(r"\s+", "", text))  # spaces: a statement over lines
  if m is None:
    return None
  out_dims = [int(x) for x in m.group(1).split(",")]
  dims = [int(x) for x in m.group(2).split(",")]
  perm = [int(x) for x in m.group(3).split(",")] if m.group(3) else list(range(len(dims)))
  strides = [1] * len(dims)
  for k in range(len(dims) - 2, -1, -1):
    strides[k] = strides[k + 1] * dims[k + 1]
  tdims = [dims[p] for p in perm]
  ids = [sum(idx[k] * strides[perm[k]] for k in range(len(perm)))
         for idx in itertools.product(*(range(d) for d in tdims))]
  size = out_dims[-1] if out_dims else 1
  if size <= 0:
    return []
  return [ids[i:i + size] for i in range(0, len(ids), size)]


_MESH_RE = re.compile(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}")


def expand_mesh_groups(text):
  """Expands jaxlib 0.10's `mesh['a'=8,'b'=1] {'a'}` replica groups; None if not that form.

  Devices are the mesh laid out row-major; a group is every device that differs
  only along the chosen axes, enumerated in the chosen order.
  """
  m = _MESH_RE.fullmatch(text.strip())
  if m is None:
    return None
  try:
    axes = [(name.strip().strip("'"), int(size)) for name, size in
            (a.split("=") for a in m.group(1).split(",") if a.strip())]
  except ValueError:
    return None
  names = [n for n, _ in axes]
  sizes = dict(axes)
  chosen = [a.strip().strip("'") for a in m.group(2).split(",") if a.strip()]
  if any(c not in sizes for c in chosen):
    return None
  others = [n for n in names if n not in chosen]

  def device(index):
    flat = 0
    for n in names:
      flat = flat * sizes[n] + index[n]
    return flat

  groups = []
  for rest in itertools.product(*(range(sizes[n]) for n in others)):
    groups.append([device(dict(zip(others + chosen, rest + sel)))
                   for sel in itertools.product(*(range(sizes[n]) for n in chosen))])
  return groups


# ---------------------------------------------------------------------------------------
# The model

class HloInstruction:
  """One HLO instruction. `attributes` keeps every `key=value` verbatim, in order."""

  __slots__ = ("name", "shape", "opcode", "operands", "attributes", "is_root", "line",
               "col", "operand_text", "computation")

  def __init__(self, name, shape, opcode, operands, attributes, is_root, line, col,
               operand_text):
    self.name = name
    self.shape = shape
    self.opcode = opcode
    self.operands = operands  # operand instruction names, without '%'
    self.attributes = attributes  # dict name -> raw text
    self.is_root = is_root
    self.line = line
    self.col = col
    self.operand_text = operand_text  # raw text between the parentheses
    self.computation = None

  def __repr__(self):
    return f"<HloInstruction %{self.name} = {self.shape} {self.opcode} line {self.line}>"

  @property
  def literal(self):
    """A constant's literal text."""
    return self.operand_text if self.opcode == "constant" else None

  @property
  def parameter_number(self):
    return int(self.operand_text) if self.opcode == "parameter" else None

  @property
  def called_computations(self):
    """Names of the computations this instruction calls, in attribute order."""
    out = []
    for key, raw in self.attributes.items():
      if key in _CALL_ATTR_SET:
        out.extend(_parse_name_list(raw))
    return out

  @property
  def async_execution_thread(self):
    raw = self.attributes.get("async_execution_thread")
    return None if raw is None else _unquote(raw)

  @property
  def source_target_pairs(self):
    raw = self.attributes.get("source_target_pairs")
    return None if raw is None else [tuple(p) for p in _parse_int_lists(raw)]

  @property
  def channel_id(self):
    raw = self.attributes.get("channel_id")
    return None if raw is None else int(raw)

  @property
  def replica_groups_text(self):
    return self.attributes.get("replica_groups")

  @property
  def replica_groups(self):
    """List of groups; the iota (`[2,4]<=[8]`) and mesh forms are expanded."""
    raw = self.attributes.get("replica_groups")
    if raw is None:
      return None
    if raw.startswith("{"):
      return _parse_int_lists(raw) if raw.strip("{} ") else []
    if raw.startswith("mesh["):
      return expand_mesh_groups(raw)
    return _expand_iota(raw)

  @property
  def backend_config(self):
    return self.attributes.get("backend_config")

  def backend_config_json(self):
    """backend_config parsed as JSON (also when printed as a quoted string), else None."""
    raw = self.attributes.get("backend_config")
    if raw is None:
      return None
    text = _unquote(raw) if raw.startswith('"') else raw
    try:
      return json.loads(text)
    except (ValueError, RecursionError):  # deeply nested JSON too: not a config we read
      return None

  @property
  def frontend_attributes(self):
    raw = self.attributes.get("frontend_attributes")
    return {} if raw is None else _parse_kv(raw)

  @property
  def metadata(self):
    raw = self.attributes.get("metadata")
    return {} if raw is None else _parse_kv(raw)

  @property
  def control_predecessors(self):
    raw = self.attributes.get("control-predecessors")
    return [] if raw is None else _parse_name_list(raw)

  @property
  def sharding(self):
    return self.attributes.get("sharding")

  def operand_instructions(self):
    comp = self.computation
    return [comp.instruction(n) for n in self.operands]


_FLOAT_LITERAL_RE = re.compile(r"-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|inf|nan)")
_INT_BITS = {"s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64}


_GOOD_LITERALS = set()  # (element type, literal) pairs already checked
# Numbers (and inf, nan, true, false) in braces: the characters an array literal has.
_ARRAY_LITERAL_RE = re.compile(r"(?:[\s{}(),0-9.eE+\-]++|inf|nan|true|false)*+")


def _scalar_literal_problem(etype, text):
  """Why XLA would refuse `text` as a scalar constant of `etype`, or None."""
  if (etype, text) in _GOOD_LITERALS:
    return None
  problem = _scalar_literal_check(etype, text.strip())
  if problem is None and len(_GOOD_LITERALS) < 100000:
    _GOOD_LITERALS.add((etype, text))
  return problem


def _scalar_literal_check(etype, text):
  if etype == "pred":
    ok = text in ("true", "false") or text.isdigit()
  elif etype[0] in "su" and etype[1:].isdigit():
    if not _INT_VALUE_RE.fullmatch(text):
      return f"{etype} constant needs an integer, got {text[:30]!r}"
    bits = _INT_BITS.get("s" + etype[1:], 64)
    low, high = ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if etype[0] == "s"
                 else (0, (1 << bits) - 1))
    ok = low <= int(text) <= high
  elif etype.startswith(("f", "bf")):
    ok = (bool(_FLOAT_LITERAL_RE.fullmatch(text))
          and (not text.isdigit() or _ints_fit(text))  # an integer token must fit int64
          and ("inf" in text or "nan" in text or abs(float(text)) != float("inf")))
  else:
    return None  # complex, token, opaque: not checked
  return None if ok else f"{text[:30]!r} is not a {etype} value"


def _top_level_arrow(text):
  """Index of the first '->' outside brackets, or -1."""
  depth = 0
  for k, ch in enumerate(text):
    if ch in "([{":
      depth += 1
    elif ch in ")]}":
      depth -= 1
    elif ch == "-" and depth == 0 and text.startswith("->", k):
      return k
  return -1


def _compatible(a, b):
  """XLA's ShapeUtil::Compatible: same structure, element types and sizes; layouts and
  dynamic marks ignored. Iterative: tuples may nest deeply."""
  todo = [(a, b)]
  while todo:
    a, b = todo.pop()
    if a is b:
      continue
    if a.tuple_shapes is None or b.tuple_shapes is None:
      if a.tuple_shapes is not b.tuple_shapes or a.element_type != b.element_type or (
          a.dims != b.dims):
        return False
    elif len(a.tuple_shapes) != len(b.tuple_shapes):
      return False
    else:
      todo.extend(zip(a.tuple_shapes, b.tuple_shapes))
  return True


class HloComputation:
  """A computation: instructions in order, root, parameters (by parameter number)."""

  def __init__(self, name, is_entry, line, signature, execution_thread=None):
    self.name = name
    self.is_entry = is_entry
    self.line = line
    self.signature = signature  # "(p: f32[]) -> f32[]" as printed, or ""
    self.execution_thread = execution_thread
    self.instructions = []
    self.root = None
    self.module = None
    self._by_name = {}
    self._declared_shape = None  # the signature's result shape, when printed

  def __repr__(self):
    return f"<HloComputation %{self.name}: {len(self.instructions)} instructions>"

  @property
  def parameters(self):
    params = [i for i in self.instructions if i.opcode == "parameter"]
    return sorted(params, key=lambda i: i.parameter_number)

  def instruction(self, name):
    return self._by_name[name.lstrip("%")]

  def __contains__(self, name):
    return name.lstrip("%") in self._by_name

  def __iter__(self):
    return iter(self.instructions)


class HloModule:
  """A parsed HLO module."""

  def __init__(self, name, attributes, path):
    self.name = name
    self.path = path
    self.attributes = attributes  # every header attribute, raw text, in order
    self.computations = []
    self.entry = None
    self.tables = {}  # "FileNames" etc. -> list of raw lines
    self.file_names = {}  # id -> str
    self.function_names = {}  # id -> str
    self.file_locations = {}  # id -> {field: int}
    self.stack_frames = {}  # id -> {field: int}
    self._by_name = {}

  def __repr__(self):
    return f"<HloModule {self.name}: {len(self.computations)} computations>"

  def _int_attr(self, key, default):
    raw = self.attributes.get(key)
    return default if raw is None else int(raw)

  @property
  def num_partitions(self):
    return self._int_attr("num_partitions", 1)

  @property
  def num_replicas(self):
    return self._int_attr("replica_count", self._int_attr("num_replicas", 1))

  @property
  def is_scheduled(self):
    return self.attributes.get("is_scheduled") == "true"

  @property
  def entry_computation_layout(self):
    raw = self.attributes.get("entry_computation_layout")
    return raw[1:-1] if raw and raw.startswith("{") else raw

  @property
  def frontend_attributes(self):
    raw = self.attributes.get("frontend_attributes")
    return {} if raw is None else _parse_kv(raw)

  def computation(self, name):
    return self._by_name[name.lstrip("%")]

  def __contains__(self, name):
    return name.lstrip("%") in self._by_name

  def instructions(self):
    for comp in self.computations:
      yield from comp.instructions

  @property
  def instruction_count(self):
    return sum(len(c.instructions) for c in self.computations)


# ---------------------------------------------------------------------------------------
# Parsing

def parse_hlo_text(text, path="<string>"):
  """Parses HLO module text (str or bytes) into an HloModule."""
  if isinstance(text, (bytes, bytearray)):
    text = _decode(bytes(text), path)
  return _parse(text, path)


def _parse(text, path):
  """XLA prints one statement a line, and the fast reading takes that for granted. Where it
  fails, the text is read again statement by statement, where a statement may span lines
  (XLA's lexer takes a newline as white space): that reading accepts or gives the error."""
  first = _Parser(text, path)
  try:
    return first.parse()
  except HloParseError:
    pass  # leave the handler first: the traceback holds the first reading's objects
  first.discard()
  del first
  return _Parser(text, path, split=True).parse()


# Larger inputs are refused before reading: the reader holds about 8 bytes per byte of
# text (docs/reliability.md).
MAX_INPUT_BYTES = DEFAULT_MAX_INPUT_BYTES


def parse_hlo_file(path, max_bytes=MAX_INPUT_BYTES):
  """Parses an HLO text file ("-": stdin); HloParseError for bad content or more
  than max_bytes bytes (files, devices and pipes alike), OSError if unreadable."""
  try:
    data = read_input(path, max_bytes)
  except InputReadError as e:
    if e.message.startswith("input is"):
      raise HloParseError(str(path), 1, 1, e.message.replace(" (--max-input-bytes)", "")) from None
    raise OSError(e.message.replace("cannot read: ", "")) from None
  return _parse(_decode(data, str(path)), str(path))


def load_hlo_proto(path):
  """Loads a serialized HloModuleProto through jaxlib (which prints it) and parses it."""
  try:
    from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise RuntimeError(f"load_hlo_proto needs jaxlib, which is not importable: {e}") from e
  with open(path, "rb") as f:
    data = f.read()
  try:
    text = xla_client.XlaComputation(data).as_hlo_text()
  except Exception as e:  # jaxlib raises its own error types
    raise HloParseError(str(path), 1, 1, f"not a serialized HloModuleProto: {e}") from e
  return parse_hlo_text(text, str(path))


def _decode(data, path):
  """Text of the input. Bytes that are not UTF-8 become lone surrogates (U+DC80..DCFF):
  XLA's lexer takes them inside /* comments */ only, which _Parser checks per line."""
  if b"\0" in data[:4096]:
    raise HloParseError(path, 1, 1, "binary data, not HLO text")
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError:
    return data.decode("utf-8", "surrogateescape")


_NOT_UTF8_RE = re.compile("[\udc80-\udcff]")


_OCTAL_RE = re.compile(r"[0-7]{1,3}")
_HEX_RUN_RE = re.compile(r"[0-9A-Fa-f]*")
_SIMPLE_ESCAPES = frozenset("ntr\\'\"?abfv")


def _bad_escape(body):
  """Offset of the first escape in a string's body that XLA (absl::CUnescape) refuses,
  or None."""
  k = body.find("\\")
  while k >= 0:
    c = body[k + 1:k + 2]
    end = k + 2
    if c in _SIMPLE_ESCAPES and c:
      pass
    elif c and c in "01234567":
      digits = _OCTAL_RE.match(body, k + 1).group()
      if int(digits, 8) > 0xFF:
        return k
      end = k + 1 + len(digits)
    elif c == "x":
      digits = _HEX_RUN_RE.match(body, k + 2).group()
      if not digits or int(digits, 16) > 0xFF:
        return k
      end = k + 2 + len(digits)
    elif c in ("u", "U"):
      n = 4 if c == "u" else 8
      digits = body[k + 2:k + 2 + n]
      if len(digits) != n or not _HEX_RUN_RE.fullmatch(digits) or int(digits, 16) > 0x10FFFF:
        return k
      end = k + 2 + n
    else:
      return k
    k = body.find("\\", end)
  return None


def _line_breaks(text):
  """Text with "\n" line ends only. XLA takes CR as white space: a CR-only file is
  read as lines, a stray CR elsewhere as a space."""
  if "\r" not in text:
    return text
  if "\n" not in text:
    return text.replace("\r", "\n")
  return text.replace("\r\n", "\n").replace("\r", " ")


_STR_OR_COMMENT_RE = re.compile(r'"(?:[^"\\\n]|\\.)*+"?|/\*.*?\*/')
_STR_SPLIT_RE = re.compile(r'"(?:[^"\\]++|\\.)*+"?')


def _blank_comment(m):
  return " " * len(m.group(0))


def _blank_string_or_comment(m):
  text = m.group(0)
  return text if text[0] == '"' else " " * len(text)


def _blank_comments(line):
  """The line with every /* comment */ as spaces (columns kept): XLA's lexer skips
  comments between any two tokens, so the reader sees white space there."""
  if '"' not in line:
    return _COMMENT_RE.sub(_blank_comment, line)
  return _STR_OR_COMMENT_RE.sub(_blank_string_or_comment, line)


_SPLIT_SKIP_RE = re.compile(r'"|/[*/]')


def _blank_all_comments(text):
  """The text with every comment as spaces, newlines kept: /* */ may span lines and //
  runs to the end of its line (XLA's lexer). Strings may span lines too, but not by a
  backslash before the newline. One pass. Returns (text, offset of an unterminated /*
  or string, or None): XLA's lexer fails there, whatever comes before."""
  parts, k, done, bad = [], 0, 0, None
  while True:
    m = _SPLIT_SKIP_RE.search(text, k)
    if m is None:
      break
    at = m.start()
    if m.group() == '"':
      sm = _STR_RE.match(text, at)
      if sm is None:
        bad = at
        break
      k = sm.end()
      continue
    end = text.find("*/", at + 2) + 2 if m.group() == "/*" else text.find("\n", at)
    if end == 1:
      bad = at
      break
    if end < 0:
      end = len(text)
    chunk = text[at:end]
    parts += [text[done:at], "\n".join(" " * len(l) for l in chunk.split("\n"))]
    k = done = end
  if not parts:
    return text, bad
  parts.append(text[done:])
  return "".join(parts), bad


# Bracket nesting the scanners follow before refusing the text: XLA's parser recurses
# per level (nvshmem-opt refuses more than 512), and a hostile line of a million '{'
# must fail at once, not build a stack of a million entries.
MAX_NESTING = 1024

# A line that starts an instruction, a computation or a module. Inside an open bracket
# it means the bracket is never closed: no value in XLA's grammar holds such text.
_STATEMENT_START_RE = re.compile(
    r"[ \t]*(?:(?:ROOT[ \t]+)?%?[A-Za-z_][\w.\-]*[ \t]*=[ \t]*(?:[a-z][a-z0-9]*[ \t]*\[|\()"
    r"|ENTRY[ \t]|HloModule[ \t])")
_STATEMENT_START_ML_RE = re.compile("^" + _STATEMENT_START_RE.pattern, re.M)
_FLAT_GROUP_RE = re.compile(r"\{[^{}()\[\]\n]*\}|\([^{}()\[\]\n]*\)|\[[^{}()\[\]\n]*\]")
_CHUNK, _CHUNK_CHARS = 4096, 1 << 18  # what _skip_inside takes at once, at most
_TOP_TOKEN_RE = re.compile(r'[(){}\[\]",=]|[^\s(){}\[\]",=]+')
_STR_TAIL_RE = re.compile(r'(?:[^"\\]++|\\.)*+"')  # the rest of a string begun above
_NEWLINE_OR_STRING_RE = re.compile(r'"(?:[^"\\]++|\\.)*+"|\n')
_WANTS_MORE = frozenset(("=", ",", "ROOT", "ENTRY", "HloModule"))  # a statement goes on
_LAYOUT_FIRST = frozenset("0123456789-:")  # after '{', these make it a layout (XLA)
# A bracketed group closed on its line (strings minded, 10 levels): skipped in one step.
_GROUP_RES = {"{": re.compile(_BRACES), "(": re.compile(_nested("(", ")", True, 10)),
              "[": re.compile(r'\[[^\[\]"]*+\]')}
_FIRST_RE = re.compile(r"\s*+(\S)")
_WORD_PAREN_RE = re.compile(r"\s*[A-Za-z_][\w.\-]*\(")  # no statement starts so


def _first(line):
  """The first character of line that is not white space, or ''."""
  m = _FIRST_RE.match(line)
  return m.group(1) if m else ""


class _Gather:
  """What _Parser._scan has read of a statement so far."""

  __slots__ = ("depth", "last", "seen_eq", "operands", "operands_done", "opener",
               "in_string", "string_lines", "brace_after_bracket", "too_deep", "tokens",
               "kind_instr", "retry_at")

  def __init__(self):
    self.depth = 0  # open brackets
    self.last = None  # last token outside brackets: '=', ',', a keyword, 'word', ...
    self.seen_eq = False  # an '=' outside brackets (an instruction's)
    self.operands = False  # the open '(' follows the opcode
    self.operands_done = False  # the operand list is closed
    self.opener = None  # (line, column, char) of the outermost open bracket
    self.in_string = None  # (line, column) of an open string's quote
    self.string_lines = False  # some string spans lines
    self.brace_after_bracket = False  # the last top-level '{' follows ']'
    self.too_deep = False  # nested deeper than MAX_NESTING
    self.tokens = 0  # an instruction's words before its '=' (ROOT, the name, ':')
    self.kind_instr = False
    self.retry_at = 0  # the first line _Parser._skip_inside may try again


class _Parser:
  """Line-oriented parser. XLA prints one statement (module header, computation header,
  instruction, closing brace) per line; with split=True a statement may span lines."""

  def __init__(self, text, path, split=False):
    self.path = path
    self.split = split
    self._spans = {}  # first line of a joined statement -> offsets of its lines in it
    self.module = self._comp = None  # what is being built (for discard())
    self.check_metadata = _UNUSUAL_METADATA_RE.search(text) is not None
    text = _line_breaks(text)
    bad = None
    if split and ("/" in text or '"' in text):
      text, bad = _blank_all_comments(text)
    self.lines = text.split("\n")
    if bad is not None:
      line = text.count("\n", 0, bad)
      col = bad - (text.rfind("\n", 0, bad) + 1) + 1
      self.error(line, col, "unterminated /* comment" if text[bad] == "/"
                 else "unterminated string (a string may span lines, but not by a '\\' "
                 "before the newline)")
    if "/*" in text and not split:
      self.lines = [_blank_comments(l) if "/*" in l else l for l in self.lines]
    if not text.isascii() and _NOT_UTF8_RE.search(text):
      self._check_not_utf8()
    if "\\" in text and not split:  # split: per statement, once it is joined
      for i, line in enumerate(self.lines):
        if "\\" in line:
          self._check_escapes(line, i)
    if len(self.lines) > 1 and not self.lines[-1]:
      self.lines.pop()  # the final newline does not start a line

  def discard(self):
    """Frees what a failed reading built now, not at the next garbage collection (its
    instructions and computations refer to each other)."""
    for comp in (self.module.computations if self.module else []) + [self._comp]:
      if comp is not None:
        comp.instructions.clear()
        comp._by_name.clear()
        comp.root = None
    self.module = self._comp = self.lines = None

  def _check_escapes(self, line, i, split=False):
    """C escapes in quoted strings, as XLA unescapes them (a JSON backend_config's own
    strings excepted: XLA keeps that text as it is). split: a joined statement, whose
    comments are blank already and whose strings may hold newlines."""
    json_at = line.find("backend_config={")
    json_end = -1
    if json_at >= 0:
      sc = _Scanner(self, line, i, 0)
      sc.i = json_at + len("backend_config=")
      json_end = sc.balanced()
    for m in (_STR_SPLIT_RE if split else _STR_OR_COMMENT_RE).finditer(line):
      if m.group(0)[0] != '"' or json_at < m.start() < json_end:
        continue
      bad = _bad_escape(m.group(0)[1:-1])
      if bad is not None:
        self.error(i, m.start() + 2 + bad, "invalid escape sequence in string")

  def _check_not_utf8(self):
    for i, line in enumerate(self.lines):
      if _NOT_UTF8_RE.search(line):  # comments are blank already
        bad = _NOT_UTF8_RE.search(line)
        if bad:
          self.error(i, bad.start() + 1, f"byte {ord(bad.group()) - 0xDC00:#04x} is not UTF-8 "
                     "(XLA takes such bytes inside /* comments */ only)")

  def error(self, lineno, col, message):
    if self._spans and lineno in self._spans:  # a joined statement: that offset's line
      line, col = self._where(lineno, col)
      lineno = line - 1
    raise HloParseError(self.path, lineno + 1, col, message)

  # -------------------------------------------------------------------------------------
  # Statements over several lines (split=True). XLA's parser reads tokens, so a newline
  # may stand wherever a space may. _gather finds where the statement that starts at
  # line i ends, in one pass over its lines, and joins them into lines[i] (the other
  # lines become blank); error() maps a column of the joined text back to its line.

  def _gather(self, i, kind):
    """lines[i], or the statement from line i joined with the lines it continues on.
    kind: 'instr', 'head' (computation header), 'header' (HloModule), 'close' ('}')."""
    lines, n, first_re = self.lines, len(self.lines), _FIRST_RE.match
    st = _Gather()
    st.kind_instr = kind == "instr"
    k, pos = i, (lines[i].index("}") + 1 if kind == "close" else 0)
    while True:
      self._scan(st, k, pos)
      pos = 0
      if st.too_deep or st.tokens > 3:
        break  # nesting the reader refuses, or more than `ROOT name:` before the '='
      nxt, first = k + 1, None
      while nxt < n:
        first = first_re(lines[nxt])
        if first:
          first = first.group(1)
          break
        nxt += 1
      if st.in_string is None:
        if self._complete(st, kind, first) and not (  # `T(1,0)`: an iota's transpose
            kind == "instr" and first and first.isalpha() and _WORD_PAREN_RE.match(lines[nxt])):
          break
        if first is None:
          self._unclosed(st, "the end of the input")
          break
        if _STATEMENT_START_RE.match(lines[nxt]):
          self._unclosed(st, f"line {nxt + 1}, which starts a new statement")
          if kind != "instr" or st.seen_eq:
            break  # no statement holds that line: XLA fails before it, so does the reader
        elif not st.depth and first == "}":
          break  # a '}' that closes nothing of the statement: the reader reports it
      elif first is None:
        self._unclosed(st, "the end of the input")
      k = nxt
      if st.depth and st.in_string is None and kind != "head" and k >= st.retry_at:
        k = self._skip_inside(st, k, min(k - i, _CHUNK))
    if k > i:
      self._join(i, k, st.string_lines)
    if "\\" in lines[i]:
      self._check_escapes(lines[i], i, True)
    return lines[i]

  def _skip_inside(self, st, k, count):
    """Skips whole chunks of lines from line k that cannot close the open bracket: no
    string, no line that starts a statement, fewer closers than open brackets once the
    groups closed on their line are taken out. A bracket never closed over millions of
    lines then costs a few scans per chunk. A chunk has as many lines as the statement
    has so far (up to _CHUNK), and one that cannot be skipped defers the next try by
    as many lines: linear either way. Returns the next line to scan."""
    lines = self.lines
    if count < 64:
      return k  # the usual statement of a few lines: line by line
    while k + count < len(lines):
      while count > 1 and sum(map(len, lines[k:k + count])) > _CHUNK_CHARS:
        count //= 4  # long lines: fewer at once, to keep the copy small
      chunk = "\n".join(lines[k:k + count])
      rest = "" if '"' in chunk or _STATEMENT_START_ML_RE.search(chunk) else (
          _FLAT_GROUP_RE.sub("", chunk))
      closes = rest.count(")") + rest.count("]") + rest.count("}")
      depth = st.depth + rest.count("(") + rest.count("[") + rest.count("{") - closes
      if not rest or closes >= st.depth or depth > MAX_NESTING:
        st.retry_at = k + count  # the lines decide: read them one by one
        break
      st.depth, k, count = depth, k + count, min(count * 2, _CHUNK)
    return k

  def _statement(self, i):
    """The instruction or '}' statement at line i (joined), and _INSTR_RE's match."""
    line = self.lines[i]
    first = _first(line)
    if not first:
      return line, None
    line = self._gather(i, "close" if first == "}" else "instr")
    return line, (_INSTR_RE.match(line) if "\n" not in line else None)  # (.*) stops at \n

  def _where(self, i, col):
    """(line number, column) of column col of the joined statement at line i."""
    spans = self._spans[i]
    k = max(bisect.bisect_right(spans, col - 1) - 1, 0)
    return i + k + 1, col - spans[k]

  @staticmethod
  def _complete(st, kind, first):
    """Whether the statement ends with the line just scanned (first: the first character
    of the next line with text, None at the end). It goes on while a bracket is open or
    a value is due; then, for a statement that may take more attributes, while the next
    line does not start a statement."""
    if kind == "head":  # ends with the body's '{', not a layout's
      return st.depth == 1 and st.last == "{" and not (
          st.brace_after_bracket and first in _LAYOUT_FIRST)
    if st.depth or st.last in _WANTS_MORE or (kind == "instr" and not st.operands_done):
      return False
    return first is None or first in "%}" or first.isalpha() or first == "_"

  def _unclosed(self, st, where):
    """An open bracket or string where the statement has to end: the error, at it."""
    if st.in_string is not None:
      k, col = st.in_string
      self.error(k, col + 1, f"unterminated string: no closing '\"' before {where}")
    if st.depth:
      k, col, ch = st.opener
      self.error(k, col + 1, f"unbalanced {ch!r}: no matching {_CLOSERS[ch]!r} before {where}")

  @staticmethod
  def _scan_start(st, line, pos):
    """Where _scan starts its tokens in line (None: nothing left to read there): after
    the end of a string begun above, after an instruction's usual head, or nowhere for
    a line inside a bracket it cannot close."""
    if st.in_string is not None:  # a string begun above: find its end
      m = _STR_TAIL_RE.match(line)
      if m is None:
        return None
      st.in_string, st.string_lines = None, True
      if not st.depth:
        st.last = "value"
      return m.end()
    if not st.depth and st.last is None and st.kind_instr:  # `[ROOT] name = shape op(...)`
      m = _INSTR_HEAD_RE.match(line, pos)
      if m is not None:
        st.seen_eq = st.operands_done = True
        st.last = ")"
        return m.end()
    elif st.depth and '"' not in line:
      closes = line.count(")") + line.count("]") + line.count("}")
      if closes < st.depth:
        st.depth += line.count("(") + line.count("[") + line.count("{") - closes
        st.too_deep = st.depth > MAX_NESTING
        return None
    return pos

  def _scan(self, st, k, pos):
    """Reads the tokens of line k from pos into st (depth, last token and so on)."""
    line = self.lines[k]
    pos = self._scan_start(st, line, pos)
    while pos is not None:
      m = (_SPECIAL_RE if st.depth else _TOP_TOKEN_RE).search(line, pos)
      if m is None:
        return
      tok, pos = m.group(), m.end()
      c = tok[0]
      if c == "," and not st.depth:  # fast: whole `, key=value` attributes
        run = _ATTR_RUN_RE.match(line, m.start())
        if run.end() > m.start():
          st.last, pos = "value", run.end()
          continue
      if c in "([{":
        group = _GROUP_RES[c].match(line, m.start())  # the usual: closed on this line
        if not st.depth:
          operands = c == "(" and st.last == "word" and st.seen_eq
          st.brace_after_bracket = st.last == "]"
          if group is not None:
            st.last = _CLOSERS[c]
            st.operands_done = st.operands_done or operands
          else:
            st.opener, st.operands, st.last = (k, m.start(), c), operands, c
        if group is not None:
          pos = group.end()
          continue
        st.depth += 1
        if st.depth > MAX_NESTING:
          st.too_deep = True
          return
      elif c in ")]}":
        if st.depth:
          st.depth -= 1
        if not st.depth:
          st.last = c
          st.operands_done = st.operands_done or st.operands
      elif c == '"':
        sm = _STR_RE.match(line, m.start())
        if sm is None:
          st.in_string = (k, m.start())
          return
        pos = sm.end()
        if not st.depth:
          st.last = "value"
      elif not st.depth:
        st.last = tok if tok in _WANTS_MORE else "word"
        if tok == "=":
          st.seen_eq = True
        elif not st.seen_eq and st.kind_instr:
          st.tokens += 1

  def _join(self, i, k, string_lines):
    """Lines i..k as one line at i, newlines as spaces (but inside strings)."""
    lines = self.lines
    seg = lines[i:k + 1]
    starts, offset = [], 0
    for line in seg:
      starts.append(offset)
      offset += len(line) + 1
    if string_lines:
      joined = _NEWLINE_OR_STRING_RE.sub(
          lambda m: " " if m.group() == "\n" else m.group(), "\n".join(seg))
    else:
      joined = " ".join(seg)
    lines[i] = joined
    lines[i + 1:k + 1] = [""] * (k - i)
    self._spans[i] = starts

  def _check_ints(self, attrs, keys, i):
    """Integer attributes are read lazily (e.g. `channel_id`); check them here so a bad
    value is a parse error at its column, not a ValueError later (found by fuzzing)."""
    for key in keys:
      value = attrs.get(key)
      if value is not None and not _INT_VALUE_RE.fullmatch(value):
        line = self.lines[i]
        at = line.find(key + "=")
        self.error(i, (at + len(key) + 2) if at >= 0 else 1,
                   f"attribute {key!r} needs an integer, got {value[:40]!r}")

  def _bad_operands(self, ops, i, line):
    """Raises at the first operand that is not `[shape] %name`."""
    start = line.find("(" + ops + ")") + 1
    at = 0
    for part in ops.split(","):
      if not _OPERANDS_RE.fullmatch(part):
        break
      at += len(part) + 1
    self.error(i, start + at + 1, f"expected an operand name, got {ops[at:at + 30].strip()!r}")

  def _check_entry_layout(self, value, i):
    """`{(param shapes)->result shape}`, each shape as XLA's parser reads shapes."""
    line = self.lines[i]
    at = line.find("entry_computation_layout=") + len("entry_computation_layout=")
    body = value[1:-1] if value.startswith("{") and value.endswith("}") else None
    arrow = _top_level_arrow(body) if body is not None else -1
    if arrow < 0:
      self.error(i, at + 1, "entry_computation_layout must be {(parameter shapes)->shape}")
    params = body[:arrow].rstrip()
    k = _skip_ws(params, 0)
    if not params.startswith("(", k) or not params.endswith(")"):
      self.error(i, at + 2, "entry_computation_layout needs its parameters in '(...)'")
    self._shape_list(params[:-1], k + 1, i, at + 1)  # a list of shapes, not a tuple
    self._shape(body[arrow + 2:], i, at + 1 + arrow + 2)

  def _shape_list(self, text, k, i, col0):
    """Comma-separated shapes in text[k:], each checked on its own."""
    try:
      while _skip_ws(text, k) < len(text):
        _, k = _parse_shape_at(text, k)
        k = _skip_ws(text, k)
        if k < len(text):
          if text[k] != ",":
            raise _ShapeError("expected ',' between parameter shapes", k)
          k += 1
    except _ShapeError as e:
      self.error(i, col0 + e.offset + 1, str(e))

  def _check_attrs(self, opcode, attrs, i):
    """Names and value forms as XLA's parser takes them for this opcode."""
    forms = _ATTR_FORMS.get(opcode)
    if forms is None:
      forms = _ATTR_FORMS[opcode] = {k: _value_form(opcode, k) for k in _allowed_attrs(opcode)}
    for key, value in attrs.items():
      if "/*" in value:  # XLA's lexer skips comments between any two tokens
        value = _COMMENT_RE.sub(" ", value).strip()
      form = forms.get(key, _UNKNOWN)
      if form is None:
        if key == "metadata" and self.check_metadata:
          problem = _metadata_problem(value)
          if problem:
            self._attr_error(i, key, problem, True)
        continue
      if form is _UNKNOWN:
        self._attr_error(i, key, f"{opcode} takes no attribute {key!r}")
      if (form, value) in _GOOD_VALUES:  # values repeat: kind=kLoop, shardings, index=0
        continue
      if not form.fullmatch(value) or (len(value) > 18 and not _ints_fit(value)):
        self._attr_error(i, key, f"bad value for {key!r} of {opcode}: {value[:60]!r}", True)
      if len(_GOOD_VALUES) < 100000:
        _GOOD_VALUES.add((form, value))
    required = _REQUIRED_ATTRS.get(opcode)
    if required and not required <= attrs.keys():
      self.error(i, 1, f"{opcode} needs attribute {sorted(required - attrs.keys())[0]!r}")

  def _attr_error(self, i, key, message, at_value=False):
    line = self.lines[i]
    at = line.find(key + "=")
    col = (at + 1 + (len(key) + 1 if at_value else 0)) if at >= 0 else 1
    self.error(i, col, message)

  def parse(self):
    lines = self.lines
    n = len(lines)
    i = self._skip_blank(0)
    if i >= n:
      self.error(max(n - 1, 0), 1, "empty input: expected 'HloModule NAME'")
    if self.split and lines[i].lstrip().startswith("HloModule"):
      self._gather(i, "header")
    m = _MODULE_RE.match(lines[i])
    if m is None:
      self.error(i, 1, "expected 'HloModule NAME' header; this is not HLO text")
    attrs = self._attributes(m.group(2), i, m.start(2))
    for key in attrs:
      if key not in _MODULE_ATTRS:
        self._attr_error(i, key, f"HloModule takes no attribute {key!r}")
    if "entry_computation_layout" in attrs:
      self._check_entry_layout(attrs["entry_computation_layout"], i)
    if not _VALUE_FORMS["frontend_attributes"].fullmatch(attrs.get("frontend_attributes", "{}")):
      self._attr_error(i, "frontend_attributes", "bad value for the module's "
                       "'frontend_attributes': expected {name=\"text\", ...}", True)
    self._check_ints(attrs, _MODULE_INT_ATTRS, i)
    module = self.module = HloModule(m.group(1), attrs, self.path)
    i += 1
    while True:
      i = self._skip_blank(i)
      if i >= n:
        break
      stripped = lines[i].strip()
      if self.split and stripped.split(None, 1)[0] in _TABLES:
        i = self._table_split(module, i)
        continue
      if stripped in _TABLES:
        i = self._table(module, stripped, i + 1)
        continue
      comp, i = self._computation(i)
      if comp.name in module._by_name:
        self.error(comp.line - 1, 1, f"duplicate computation %{comp.name}")
      comp.module = module
      module.computations.append(comp)
      module._by_name[comp.name] = comp
      if comp.is_entry:
        if module.entry is not None:
          self.error(comp.line - 1, 1, "more than one ENTRY computation")
        module.entry = comp
    if not module.computations:
      self.error(n - 1, 1, "module has no computations")
    if module.entry is None:  # XLA takes the last computation as the entry
      module.entry = module.computations[-1]
    self._check_calls(module)
    for comp in module.computations:
      for instr in comp.instructions:
        if instr.opcode in _PERMUTE_OPCODES and "source_target_pairs" in instr.attributes:
          self._check_pairs(comp, instr)
    return module

  def _check_pairs(self, comp, instr):
    """What XLA's verifier checks of every permute's pairs, before any tool decides on
    them: ids >= 0, and no source (target) twice, or, in the in-place form with N
    slices, no more than N times."""
    raw = instr.attributes["source_target_pairs"]
    if raw in _GOOD_PAIRS:
      return
    pairs = [p for p in _parse_int_lists(raw) if len(p) == 2]
    sources, targets = {p[0] for p in pairs}, {p[1] for p in pairs}
    if len(sources) == len(targets) == len(pairs) and min(sources | targets, default=0) >= 0:
      if len(_GOOD_PAIRS) < 10000:
        _GOOD_PAIRS.add(raw)
      return  # the usual case: a permutation of distinct ids
    allowed = self._slices(comp, instr)
    seen = ({}, {})
    for pair in pairs:
      for side, (what, device) in enumerate(zip(("source", "target"), pair)):
        problem = None
        if device < 0:
          problem = f"{what} {device} is negative"
        else:
          seen[side][device] = seen[side].get(device, 0) + 1
          if seen[side][device] > allowed:
            times = "once" if allowed == 1 else f"{allowed} times"
            problem = f"{what} {device} appears more than {times}"
        if problem:
          self._attr_error(instr.line - 1, "source_target_pairs",
                           f"%{instr.name}: {problem} in source_target_pairs (XLA's "
                           "verifier rejects this permute)", True)

  @staticmethod
  def _slices(comp, instr):
    """How often an id may repeat: 1, or the slice count of the in-place form."""
    if len(instr.operands) != 4:
      return 1
    try:
      first, offsets = (comp.instruction(instr.operands[0]).shape,
                        comp.instruction(instr.operands[2]).shape)
      if not first.is_tuple:
        return len(offsets.tuple_shapes)
      return len(offsets.tuple_shapes[0].tuple_shapes)
    except (KeyError, TypeError, IndexError):
      return 1

  def _skip_blank(self, i):
    lines = self.lines
    while i < len(lines):
      s = lines[i].strip()
      if s and not s.startswith("//"):
        break
      i += 1
    return i

  def _table(self, module, name, i):
    lines = self.lines
    raw = []
    parsed = {}
    while i < len(lines):
      line = lines[i]
      if not line.strip():
        break
      m = _TABLE_ROW_RE.match(line)
      if m is None:
        break  # the table ends where rows stop; a computation may follow
      raw.append(line)
      self._table_row(parsed, m.group(1), m.group(2))
      i += 1
    self._store_table(module, name, raw, parsed)
    return i

  @staticmethod
  def _table_row(parsed, number, value):
    parsed[int(number)] = (
        _unquote(value) if value.startswith('"')
        else {k: (int(v) if v.lstrip("-").isdigit() else _unquote(v))
              for k, v in _parse_kv(value).items()} if value.startswith("{") else value)

  @staticmethod
  def _store_table(module, name, raw, parsed):
    module.tables[name] = raw
    target = {"FileNames": module.file_names, "FunctionNames": module.function_names,
              "FileLocations": module.file_locations, "StackFrames": module.stack_frames}
    target[name].update(parsed)

  def _table_split(self, module, i):
    """A table read as tokens (split=True): its name, then `N "text"` or `N {...}` rows,
    any number a line, a row over lines if need be, up to the next word at depth 0."""
    lines = self.lines
    k, st = i, _Gather()
    while True:  # the table's last line: brackets closed, the next line starts a word
      self._scan(st, k, 0)
      nxt = k + 1
      while nxt < len(lines) and not _first(lines[nxt]):
        nxt += 1
      first = _first(lines[nxt]) if nxt < len(lines) else None
      if first is None or (not st.depth and st.in_string is None
                           and (first.isalpha() or first in "_%}")):
        break
      k = nxt
    if k > i:
      self._join(i, k, st.string_lines)
    line = lines[i]
    if "\\" in line:
      self._check_escapes(line, i, True)
    name = line.split(None, 1)[0]
    pos = line.index(name) + len(name)
    raw, parsed = [], {}
    while True:
      m = _TABLE_ITEM_RE.match(line, pos)
      if m is None:
        break
      raw.append(f"{m.group(1)} {m.group(2)}")
      self._table_row(parsed, m.group(1), m.group(2))
      pos = m.end()
    if line[pos:].strip():
      self.error(i, pos + len(line[pos:]) - len(line[pos:].lstrip()) + 1,
                 f"expected a row of table {name}: a number, then a string or {{...}}")
    self._store_table(module, name, raw, parsed)
    return k + 1

  def _computation_head(self, i):
    head = self._gather(i, "head") if self.split else self.lines[i]
    m = _COMP_HEAD_RE.match(head)
    if m is None:
      if head.rstrip().endswith("{"):
        self.error(i, 1, "expected computation header '[ENTRY] %name (params) -> shape {'")
      self.error(i, 1, f"expected a computation, got {head.strip()[:40]!r}")
    signature = m.group(3)
    result = self._check_signature(signature, i, m.start(3)) if signature else None
    comp = HloComputation(m.group(2), bool(m.group(1)), i + 1, signature)
    comp._declared_shape = result
    return comp

  def _computation(self, i):
    """Reads the computation starting at line i; returns it and the next line."""
    comp = self._comp = self._computation_head(i)
    lines, by_name, instrs = self.lines, comp._by_name, comp.instructions
    late = None  # the first name used above its definition (or never defined)
    check_metadata = self.check_metadata
    numbers = set()  # parameter numbers
    match, attrs_of, shape_cache = _INSTR_RE.match, self._attributes_fast, _SHAPE_CACHE
    simple_operands, pct_findall = _SIMPLE_OPERANDS_RE.fullmatch, _PCT_NAME_RE.findall
    split = self.split
    for i in range(i + 1, len(lines)):
      line = lines[i]
      if split:
        line, m = self._statement(i)
      else:
        m = match(line)
      if m is None:
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
          continue
        if stripped[0] == "}":
          self._close(comp, line, i, late)
          return comp, i + 1
        root, name, shape_text, opcode, ops, attrs, col = self._slow_instruction(line, i)
      else:
        root, name, shape_text, opcode, ops, rest = m.groups()
        col = m.start(2) + 1
        if line[m.end(2):m.end(2) + 1] == "=" and line[m.start(2) - 1:m.start(2)] != "%":
          # XLA's lexer reads `name=` as an attribute name, not an instruction's
          self.error(i, col, f"expected ' = ' after instruction name {name}")
        if opcode not in OPCODES and not is_known_opcode(opcode):
          self.error(i, m.start(4) + 1, f"unknown opcode {opcode!r}")
        attrs = attrs_of(rest, i, m.start(6)) if rest else {}
      shape = shape_cache.get(shape_text)
      if shape is None:
        shape = self._shape(shape_text, i, line.find(shape_text))
      if "%" in ops and simple_operands(ops) and opcode not in _LITERAL_OPCODES:
        operands = pct_findall(ops)  # the usual `%a, %b`: nothing more to check
      else:
        operands = self._operands(opcode, shape, ops, line, i, col)
      if (len(attrs) > 1 or (attrs and (check_metadata or "metadata" not in attrs))
          or opcode in _REQUIRED_ATTRS):
        self._check_attrs(opcode, attrs, i)
      if opcode in _ARITY_OPCODES:
        self._check_arity(opcode, shape, operands, i, col)
      for op in operands:  # XLA resolves a name when it reads it: defined above or error
        if op not in by_name and late is None:
          late = (op, i, col, "use of")
      if "control-predecessors" in attrs and late is None:
        late = self._late_predecessor(attrs, by_name, i, col)
      instr = HloInstruction(name, shape, opcode, operands, attrs, bool(root), i + 1, col, ops)
      if split and i in self._spans:  # the name's own line and column
        instr.line, instr.col = self._where(i, col)
      instr.computation = comp
      if opcode in _FINISH_OPCODES and late is None:
        self._check_operand_shapes(instr, by_name, numbers)
      if name in by_name:
        self.error(i, col, f"duplicate instruction name %{name}")
      by_name[name] = instr
      instrs.append(instr)
      if root:
        if comp.root is not None:
          self.error(i, col, f"second ROOT in computation %{comp.name}")
        comp.root = instr
    self.error(len(lines) - 1, len(lines[-1]) + 1,
               f"unexpected end of input: computation %{comp.name} (line {comp.line}) "
               "is not closed by '}'")

  def _close(self, comp, line, i, late):
    """The computation's closing line: `}` and maybe `, execution_thread="..."`."""
    close = _CLOSE_RE.match(line)
    if close is None:
      self.error(i, line.index("}") + 2, "unexpected text after '}'")
    if close.group(1):
      tail = self._attributes("," + close.group(1), i, line.index(",") - 1)
      thread = tail.get("execution_thread")
      comp.execution_thread = _unquote(thread) if thread else None
    self._finish(comp, late)

  def _operands(self, opcode, shape, ops, line, i, col):
    """Operand names from the text between the parentheses; constants' literals and
    parameters' numbers checked as XLA reads them."""
    if opcode == "constant" or opcode == "parameter" or not ops:
      if opcode == "constant" and shape.element_type:
        problem = (_scalar_literal_problem(shape.element_type, ops) if not shape.dims
                   else None if _ARRAY_LITERAL_RE.fullmatch(ops)
                   else f"not an array literal: {ops.strip()[:30]!r}")
        if problem:
          self.error(i, line.find("constant(") + 10, problem)
      if opcode == "parameter" and not (_INT_VALUE_RE.fullmatch(ops.strip())
                                        and _ints_fit(ops) and int(ops) >= 0):
        self.error(i, col, "parameter needs a number: parameter(N)")
      return []
    if not _SIMPLE_OPERANDS_RE.fullmatch(ops) and not _OPERANDS_RE.fullmatch(ops):
      self._bad_operands(ops, i, line)
    if "%" not in ops:
      return _bare_operands(ops)
    operands = _PCT_NAME_RE.findall(ops)
    if len(operands) <= ops.count(","):  # a name without '%' among them?
      operands = [n.lstrip("%") for n in _bare_operands(ops)]
    return operands

  def _check_arity(self, opcode, shape, operands, i, col):
    """Operand counts XLA's parser checks before anything else."""
    if opcode == "tuple":
      if not shape.is_tuple:  # XLA's parser aborts on it
        self.error(i, col, "tuple needs a tuple shape")
      if len(operands) != len(shape.tuple_shapes):
        self.error(i, col, f"tuple of {len(shape.tuple_shapes)} elements has "
                   f"{len(operands)} operands")
    least = _MIN_OPERANDS.get(opcode)
    if least is not None and len(operands) < least:
      self.error(i, col, f"{opcode} takes at least {least} operand"
                 f"{'s' if least != 1 else ''}, got {len(operands)}")
    count = _OPERAND_COUNTS.get(opcode)
    if count is not None and count != len(operands):
      self.error(i, col, f"{opcode} takes {count} operand{'s' if count != 1 else ''}, "
                 f"got {len(operands)}")

  @staticmethod
  def _late_predecessor(attrs, by_name, i, col):
    for op in _parse_name_list(attrs["control-predecessors"]):
      if op not in by_name:
        return (op, i, col, "control predecessor")
    return None

  def _finish(self, comp, late=None):
    if late is not None:
      op, i, col, what = late
      if what != "use of":
        self.error(i, col, f"{what} %{op} is not defined before this line")
      self.error(i, col, f"use of %{op} before its definition" if op in comp._by_name
                 else f"use of undefined instruction %{op}")
    if not comp.instructions:
      self.error(comp.line - 1, 1, f"computation %{comp.name} has no instructions")
    if comp.root is None:  # XLA makes the last instruction the root
      comp.root = comp.instructions[-1]
      comp.root.is_root = True
    declared, root = comp._declared_shape, comp.root.shape
    if declared is not None and declared is not root and not _compatible(declared, root):
      self.error(comp.root.line - 1, comp.root.col,
                 f"shape of computation %{comp.name}, {declared.to_string(False)}, is not "
                 f"compatible with that of its root %{comp.root.name}, "
                 f"{comp.root.shape.to_string(False)}")

  def _check_operand_shapes(self, instr, by_name, numbers):
    """The checks of XLA's parser that need operands: parameter numbers, broadcast's
    dimensions, dynamic slices' start indices."""
    if instr.opcode == "parameter":
      if instr.parameter_number in numbers:
        self.error(instr.line - 1, instr.col,
                   f"duplicate parameter number {instr.parameter_number}")
      numbers.add(instr.parameter_number)
    elif instr.opcode == "broadcast":
      if "dimensions" not in instr.attributes and by_name[instr.operands[0]].shape.dims:
        self.error(instr.line - 1, instr.col, "broadcast of a non-scalar needs 'dimensions'")
    else:
      self._check_dynamic_slice(instr, by_name)

  def _check_dynamic_slice(self, instr, by_name):
    """Start indices: one scalar per dimension, or one vector (XLA's parser)."""
    fixed = _DYNAMIC_SLICES[instr.opcode]  # operands before the indices
    ops = [by_name[o].shape for o in instr.operands]
    if len(ops) < fixed:
      return  # reported as too few operands already
    one_vector = len(ops) == fixed + 1 and len(ops[fixed].dims) == 1
    if not one_vector and len(ops) != fixed + len(ops[0].dims):
      self.error(instr.line - 1, instr.col,
                 f"{instr.opcode} of a rank-{len(ops[0].dims)} operand has "
                 f"{len(ops) - fixed} start indices")

  def _check_calls(self, module):
    names = module._by_name
    for comp in module.computations:
      for instr in comp.instructions:
        for key, raw in instr.attributes.items():  # a few each: fewer than _CALL_ATTRS
          if key not in _CALL_ATTR_SET:
            continue
          for callee in _parse_name_list(raw):
            if callee not in names:
              self.error(instr.line - 1, instr.col,
                         f"%{instr.name} calls undefined computation %{callee}")

  def _shape(self, text, i, col0):
    try:
      return parse_shape(text)
    except _ShapeError as e:
      self.error(i, max(col0, 0) + e.offset + 1, str(e))

  def _check_signature(self, sig, i, col0):
    m = _SIGNATURE_RE.match(sig)  # the usual: array-shaped parameters, then `-> shape`
    if m is not None:
      shape = _SHAPE_CACHE.get(m.group(1))
      return shape if shape is not None else self._shape(m.group(1), i, col0 + m.start(1))
    sc = _Scanner(self, sig, i, col0)
    if sc.peek() != "(":
      sc.fail("expected '(' to start the parameter list")
    sc.balanced()
    sc.ws()
    if sc.s.startswith("->", sc.i):
      sc.i += 2
      start = sc.ws()
      return self._shape(sig[start:].rstrip(), i, col0 + start)
    if not sc.at_end():
      sc.fail("expected '->' and the result shape")
    return None

  def _attributes_fast(self, rest, i, col0):
    found = _ATTR_RE.findall(rest)
    total = 0
    for whole, _, _ in found:
      total += len(whole)
    if total == len(rest):
      attrs = {k: v for _, k, v in found}
      if len(attrs) == len(found):
        return attrs
    return self._attributes(rest, i, col0)

  def _attributes(self, rest, i, col0):
    """Exact scan of `, key=value, ...`; raises at the first bad character."""
    sc = _Scanner(self, rest, i, col0)
    attrs = {}
    while True:
      sc.ws()
      if sc.at_end():
        return attrs
      sc.expect(",")
      sc.ws()
      key_at = sc.i
      key = sc.regex(_KEY_RE, "expected attribute name")
      sc.expect("=", f"expected '=' right after attribute name {key!r}")
      sc.ws()
      value = sc.value()
      if key in attrs:
        sc.fail(f"duplicate attribute {key!r}", key_at)
      attrs[key] = value

  def _slow_instruction(self, line, i):
    sc = _Scanner(self, line, i, 0)
    sc.ws()
    root = None
    if line.startswith("ROOT", sc.i) and line[sc.i + 4:sc.i + 5].isspace():
      root = "ROOT "
      sc.i += 4
      sc.ws()
    col = sc.i + 1
    m = _NAME_RE.match(line, sc.i)
    if m is None:
      sc.fail("expected an instruction name or '}'")
    name = m.group(1)
    sc.i = m.end()
    if sc.peek() == ":" and line[m.start()] != "%":  # XLA's lexer takes `name:` too
      sc.i += 1
    elif sc.peek() == "=" and line[m.start()] != "%":
      sc.fail(f"expected ' = ' after instruction name {name}", m.start())
    sc.ws()
    sc.expect("=", f"expected '=' after instruction name %{name}")
    sc.ws()
    start = sc.i
    if sc.peek() == "(":  # the shape reader finds its end (and refuses deep nesting)
      try:
        sc.i = _parse_shape_at(line, start)[1]
      except _ShapeError as e:
        self.error(i, e.offset + 1, str(e))
    else:
      m = _ARRAY_RE.match(line, sc.i)
      if m is None:
        sc.fail("unknown shape syntax")
      sc.i = m.end()
    shape_text = line[start:sc.i]
    self._shape(shape_text, i, start)
    sc.ws()
    op_at = sc.i
    opcode = sc.regex(_OPCODE_RE, "expected an opcode")
    if not is_known_opcode(opcode):
      sc.fail(f"unknown opcode {opcode!r}", op_at)
    sc.ws()
    if sc.peek() != "(":
      sc.fail(f"expected '(' after opcode {opcode!r}")
    ops_start = sc.i + 1
    sc.balanced()
    ops = line[ops_start:sc.i - 1]
    attrs = self._attributes(line[sc.i:], i, sc.i)
    return root, name, shape_text, opcode, ops, attrs, col


def _bare_operands(ops):
  """Operand names printed without '%' (and maybe with shapes or /*index*/ comments)."""
  text = _COMMENT_RE.sub("", ops)
  names = []
  depth = 0
  cur = []
  for part in re.split(r"([(){}\[\],])", text):  # rare path: hand-written HLO only
    if part in ("(", "{", "["):
      depth += 1
    elif part in (")", "}", "]"):
      depth -= 1
    elif part == "," and depth == 0:
      names.append("".join(cur))
      cur = []
      continue
    cur.append(part)
  names.append("".join(cur))
  return [n.split()[-1] for n in names if n.strip()]


class _Scanner:
  """Exact scanner over one line, for the slow path and error reporting."""

  def __init__(self, parser, s, lineno, col0):
    self.parser, self.s, self.lineno, self.col0, self.i = parser, s, lineno, col0, 0

  def fail(self, message, at=None):
    self.parser.error(self.lineno, self.col0 + (self.i if at is None else at) + 1, message)

  def ws(self):
    self.i = _WS_RE.match(self.s, self.i).end()
    if self.s.startswith("/*", self.i):
      self.fail("unterminated /* comment")
    return self.i

  def at_end(self):
    return self.i >= len(self.s)

  def peek(self):
    return self.s[self.i:self.i + 1]

  def expect(self, ch, message=None):
    if not self.s.startswith(ch, self.i):
      got = self.s[self.i:self.i + 12] or "end of line"
      self.fail(message or f"expected {ch!r}, got {got!r}")
    self.i += len(ch)

  def regex(self, rx, message):
    m = rx.match(self.s, self.i)
    if m is None:
      self.fail(message)
    self.i = m.end()
    return m.group(0)

  def balanced(self):
    """Skips a bracketed group starting at self.i, minding quoted strings."""
    s = self.s
    stack = [(s[self.i], self.i)]
    j = self.i + 1
    while stack:
      m = _SPECIAL_RE.search(s, j)
      if m is None:
        opener, at = stack[-1]
        self.fail(f"unbalanced {opener!r}: no matching {_CLOSERS[opener]!r} on this line", at)
      ch, j = m.group(0), m.start()
      if ch == '"':
        sm = _STR_RE.match(s, j)
        if sm is None:
          self.fail("unterminated string", j)
        j = sm.end()
        continue
      if ch in _CLOSERS:
        if len(stack) >= MAX_NESTING:
          self.fail(f"brackets nest deeper than {MAX_NESTING} levels", j)
        stack.append((ch, j))
      else:
        opener, at = stack.pop()
        if _CLOSERS[opener] != ch:
          self.fail(f"{ch!r} does not match {opener!r} at column {self.col0 + at + 1}", j)
      j += 1
    self.i = j
    return j

  def value(self):
    s = self.s
    start = self.i
    ch = self.peek()
    if ch == "{":
      self.balanced()
    elif ch == '"':
      m = _STR_RE.match(s, self.i)
      if m is None:
        self.fail("unterminated string")
      self.i = m.end()
    else:
      while self.i < len(s):
        ch = s[self.i]
        if ch in "([":
          self.balanced()
        elif ch in ",)]}" or ch.isspace() or ch in '{"':
          break
        else:
          self.i += 1
      if self.i == start:
        self.fail("expected an attribute value")
      if s.startswith("[", start):  # iota groups `[2,4]<=[4,2]T(1,0)`, maybe over lines
        m = _IOTA_VALUE_RE.match(s, start)
        if m is not None and m.end() > self.i:
          self.i = m.end()
      # jaxlib 0.10 prints replica groups as `mesh['a'=8,'b'=1] {'a'}`: the
      # axes chosen follow the mesh after a space.
      if s.startswith("mesh[", start) and s[self.i - 1] == "]":
        after = self.i
        while after < len(s) and s[after] == " ":
          after += 1
        if after < len(s) and s[after] == "{":
          self.i = after
          self.balanced()
    return s[start:self.i]
