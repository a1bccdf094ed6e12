#!/usr/bin/env python3
"""The numpy and torch forms of a lone record batch message read from its header
(`sluice_trainer._message`), against pyarrow reading the same message: every flat
type, nulls, slices, empty batches, and the schemas left to pyarrow.

Run with `python tests/python/message_forms.py` (PYTHONPATH naming the package);
tests/it/python_handoff.rs runs it under cargo. The torch cases need PyTorch.
"""

import datetime
import mmap
import unittest

import numpy as np
import pyarrow as pa

import sluice_trainer
from sluice_trainer._message import Message, plan


def message(batch):
    """`batch` as sluice hands it over: a lone message in a shared mapping."""
    data = batch.serialize().to_pybytes()
    memory = mmap.mmap(-1, max(len(data), 1))
    memory.write(data)
    return Message(memoryview(memory)[:len(data)], batch.schema, plan(batch.schema))


def flat_batch():
    return pa.record_batch({
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "small": pa.array([1, None, 3, 4], pa.int8()),
        "f": pa.array([0.5, 1.5, None, 3.5], pa.float32()),
        "s": pa.array(["a", None, "ccc", ""]),
        "ls": pa.array(["x", "yy", "zzz", "w"], pa.large_string()),
        "b": pa.array([b"\x00", b"", None, b"ab"], pa.binary()),
        "ok": pa.array([True, False, None, True]),
        "day": pa.array([datetime.date(2024, 1, d) for d in range(1, 5)]),
        "at": pa.array([1, 2, 3, 4], pa.timestamp("us")),
    })


def pyarrow_numpy(column):
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) \
            or pa.types.is_binary(column.type):
        return column.to_pylist()
    return column.to_numpy(zero_copy_only=False).tolist()


class Header(unittest.TestCase):
    def test_the_header_names_every_column_and_buffer(self):
        for batch in (flat_batch(), flat_batch().slice(1, 2), flat_batch().slice(0, 0)):
            found = message(batch)
            rows, nodes, _, _ = found.header()
            self.assertEqual(rows, batch.num_rows)
            self.assertEqual(nodes[1::2], tuple(c.null_count for c in batch.columns))
            self.assertTrue(found.record_batch().equals(batch))

    def test_schemas_not_flat_are_left_to_pyarrow(self):
        # (Dictionaries never come as lone messages: sluice sends them as streams.)
        batch = pa.record_batch({"id": pa.array([1, 2]), "list": pa.array([[1], [2, 3]])})
        self.assertIsNone(plan(batch.schema))
        found = message(batch)
        self.assertIsNone(found.header())
        arrays = sluice_trainer.to_numpy(found)
        self.assertEqual(arrays["id"].tolist(), [1, 2])
        self.assertEqual([list(v) for v in arrays["list"]], [[1], [2, 3]])


class Numpy(unittest.TestCase):
    def test_values_match_pyarrow_and_numbers_are_views(self):
        for batch in (flat_batch(), flat_batch().slice(1, 3), flat_batch().slice(0, 0)):
            found = message(batch)
            arrays = sluice_trainer.to_numpy(found)
            self.assertEqual(list(arrays), batch.schema.names)
            for name in batch.schema.names:
                got = arrays[name]
                values = got.tolist()
                expected = pyarrow_numpy(batch.column(name))
                if isinstance(got, sluice_trainer.Strings):
                    self.assertEqual(len(got), batch.num_rows)
                    self.assertEqual(got.valid is not None, batch.column(name).null_count > 0)
                self.assertEqual(repr(values), repr(expected), name)
            self.assertEqual(arrays["id"].flags.owndata, batch.num_rows == 0)

    def test_record_batches_and_objects_give_the_same(self):
        batch = flat_batch()
        from_header = sluice_trainer.to_numpy(message(batch), strings="objects")
        from_batch = sluice_trainer.to_numpy(batch, strings="objects")
        for name in batch.schema.names:
            self.assertEqual(repr(from_header[name].tolist()),
                             repr(from_batch[name].tolist()), name)
        self.assertEqual(from_header["s"].dtype, object)

    def test_string_views_come_as_buffers_too(self):
        batch = pa.record_batch({"v": pa.array(["a", None, "a long value, past 12 bytes"],
                                               pa.string_view())})
        got = sluice_trainer.to_numpy(message(batch))["v"]
        self.assertIsInstance(got, sluice_trainer.Strings)
        self.assertEqual(got.tolist(), batch.column("v").to_pylist())

    def test_columns_pick_and_unknown_ones_are_named(self):
        arrays = sluice_trainer.to_numpy(message(flat_batch()), columns=["s", "id"])
        self.assertEqual(list(arrays), ["s", "id"])
        with self.assertRaisesRegex(sluice_trainer.SluiceError, "no column 'nope'"):
            sluice_trainer.to_numpy(message(flat_batch()), columns=["nope"])
        with self.assertRaisesRegex(sluice_trainer.SluiceError, "strings='x'"):
            sluice_trainer.to_numpy(flat_batch(), strings="x")


class Torch(unittest.TestCase):
    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no PyTorch")
        self.torch = torch

    def test_tensors_match_those_of_the_record_batch(self):
        for batch in (flat_batch(), flat_batch().slice(2, 2), flat_batch().slice(0, 0)):
            options = dict(hash_buckets={"s": 100, "ls": 7, "b": 9}, nulls="fill",
                           fill_value=-1)
            got = sluice_trainer.to_torch(message(batch), **options)
            expected = sluice_trainer.to_torch(batch, **options)
            self.assertEqual(list(got), list(expected))
            for name, tensor in expected.items():
                self.assertEqual(got[name].dtype, tensor.dtype, name)
                self.assertTrue(self.torch.equal(got[name], tensor), name)

    def test_nulls_and_strings_not_asked_for_are_refused(self):
        with self.assertRaisesRegex(sluice_trainer.SluiceError, "column 'small' has 1 nulls"):
            sluice_trainer.to_torch(message(flat_batch()), columns=["id", "small"])
        with self.assertRaisesRegex(sluice_trainer.SluiceError, "pass hash_buckets"):
            sluice_trainer.to_torch(message(flat_batch()), columns=["s"])

    def test_numbers_without_nulls_share_the_memory(self):
        found = message(flat_batch())
        tensor = sluice_trainer.to_torch(found, columns=["id"])["id"]
        address = np.frombuffer(found.region, np.uint8).__array_interface__["data"][0]
        self.assertTrue(address <= tensor.data_ptr() < address + len(found.region))


if __name__ == "__main__":
    unittest.main()
