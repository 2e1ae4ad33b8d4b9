#!/usr/bin/python3
"""Independent reader for TensorBoard event files, used by strata's summary-writer tests.

Usage: read_tfevents.py FILE

Checks the TFRecord framing (lengths and both masked CRC32Cs, computed with the crc32c
module) and decodes every record as a tensorflow.Event with message classes built here from
TensorFlow's field numbers (not from strata's event.proto). Prints the events as JSON on
stdout and exits 0. Exits 1 with a message on stderr when the file is malformed, and 3 when
google.protobuf or crc32c is not installed (the test then warns and skips this part).
Run it with Debian's /usr/bin/python3 (python3-protobuf, python3-crc32c).
"""
import json
import struct
import sys

try:
    import crc32c
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"read_tfevents: missing module: {e}", file=sys.stderr)
    sys.exit(3)

F = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = F.LABEL_OPTIONAL, F.LABEL_REPEATED


def field(name, number, ftype, label=OPTIONAL, type_name=None, oneof=None):
    f = F(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    return f


def message(name, fields, oneofs=(), nested=()):
    m = descriptor_pb2.DescriptorProto(name=name)
    m.field.extend(fields)
    for o in oneofs:
        m.oneof_decl.add(name=o)
    m.nested_type.extend(nested)
    return m


def build_classes():
    # Field numbers from tensorflow/core/util/event.proto, framework/summary.proto,
    # framework/tensor.proto, framework/tensor_shape.proto.
    fd = descriptor_pb2.FileDescriptorProto(name="tfevents_check.proto", package="check",
                                            syntax="proto3")
    dim = message("Dim", [field("size", 1, F.TYPE_INT64), field("name", 2, F.TYPE_STRING)])
    fd.message_type.extend([
        message("TensorShapeProto",
                [field("dim", 2, F.TYPE_MESSAGE, REPEATED, ".check.TensorShapeProto.Dim"),
                 field("unknown_rank", 3, F.TYPE_BOOL)], nested=[dim]),
        message("TensorProto", [
            field("dtype", 1, F.TYPE_INT32),
            field("tensor_shape", 2, F.TYPE_MESSAGE, type_name=".check.TensorShapeProto"),
            field("tensor_content", 4, F.TYPE_BYTES),
            field("float_val", 5, F.TYPE_FLOAT, REPEATED),
            field("double_val", 6, F.TYPE_DOUBLE, REPEATED),
            field("string_val", 8, F.TYPE_BYTES, REPEATED),
        ]),
        message("HistogramProto", [
            field("min", 1, F.TYPE_DOUBLE), field("max", 2, F.TYPE_DOUBLE),
            field("num", 3, F.TYPE_DOUBLE), field("sum", 4, F.TYPE_DOUBLE),
            field("sum_squares", 5, F.TYPE_DOUBLE),
            field("bucket_limit", 6, F.TYPE_DOUBLE, REPEATED),
            field("bucket", 7, F.TYPE_DOUBLE, REPEATED),
        ]),
        message("SummaryMetadata", [
            field("plugin_data", 1, F.TYPE_MESSAGE, type_name=".check.SummaryMetadata.PluginData"),
            field("display_name", 2, F.TYPE_STRING),
            field("summary_description", 3, F.TYPE_STRING),
            field("data_class", 4, F.TYPE_INT32),
        ], nested=[message("PluginData", [field("plugin_name", 1, F.TYPE_STRING),
                                          field("content", 2, F.TYPE_BYTES)])]),
        message("Summary", [
            field("value", 1, F.TYPE_MESSAGE, REPEATED, ".check.Summary.Value"),
        ], nested=[message("Value", [
            field("tag", 1, F.TYPE_STRING),
            field("simple_value", 2, F.TYPE_FLOAT, oneof=0),
            field("histo", 5, F.TYPE_MESSAGE, type_name=".check.HistogramProto", oneof=0),
            field("tensor", 8, F.TYPE_MESSAGE, type_name=".check.TensorProto", oneof=0),
            field("metadata", 9, F.TYPE_MESSAGE, type_name=".check.SummaryMetadata"),
        ], oneofs=["value"])]),
        message("Event", [
            field("wall_time", 1, F.TYPE_DOUBLE),
            field("step", 2, F.TYPE_INT64),
            field("file_version", 3, F.TYPE_STRING, oneof=0),
            field("summary", 5, F.TYPE_MESSAGE, type_name=".check.Summary", oneof=0),
        ], oneofs=["what"]),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("check.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def masked_crc(data):
    c = crc32c.crc32c(data) & 0xFFFFFFFF
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def die(msg):
    print(f"read_tfevents: {msg}", file=sys.stderr)
    sys.exit(1)


def decode_value(v):
    out = {"tag": v.tag, "kind": v.WhichOneof("value")}
    if v.HasField("metadata"):
        out["plugin_name"] = v.metadata.plugin_data.plugin_name
        out["data_class"] = v.metadata.data_class
    if out["kind"] == "simple_value":
        out["simple_value"] = v.simple_value
    elif out["kind"] == "histo":
        h = v.histo
        out["histo"] = {"min": h.min, "max": h.max, "num": h.num, "sum": h.sum,
                        "sum_squares": h.sum_squares, "bucket_limit": list(h.bucket_limit),
                        "bucket": list(h.bucket)}
    elif out["kind"] == "tensor":
        t = v.tensor
        out["tensor"] = {"dtype": t.dtype,
                         "has_shape": t.HasField("tensor_shape"),
                         "shape": [d.size for d in t.tensor_shape.dim],
                         # text as text; every entry also in hex (image summaries hold PNG bytes)
                         "string_val": [s.decode("utf-8", "replace") for s in t.string_val],
                         "string_val_hex": [s.hex() for s in t.string_val]}
    return out


def main():
    if len(sys.argv) != 2:
        die("usage: read_tfevents.py FILE")
    Event = build_classes()
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    pos, events = 0, []
    while pos < len(data):
        if len(data) - pos < 12:
            die(f"record {len(events)}: truncated header at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if len_crc != masked_crc(header):
            die(f"record {len(events)}: length CRC mismatch at byte {pos}")
        start = pos + 12
        if len(data) - start < length + 4:
            die(f"record {len(events)}: truncated payload at byte {start}")
        payload = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if data_crc != masked_crc(payload):
            die(f"record {len(events)}: data CRC mismatch at byte {start}")
        pos = start + length + 4
        ev = Event()
        ev.ParseFromString(payload)
        out = {"wall_time": ev.wall_time, "step": ev.step, "what": ev.WhichOneof("what"),
               "record_bytes": length}
        if out["what"] == "file_version":
            out["file_version"] = ev.file_version
        elif out["what"] == "summary":
            out["values"] = [decode_value(v) for v in ev.summary.value]
        events.append(out)
    json.dump(events, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
