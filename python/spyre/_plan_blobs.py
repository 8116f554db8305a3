# SPDX-License-Identifier: Apache-2.0
"""CompilerOutput.blobs: a live view of the output's blobs, file name -> bytes.

A dict copy let ``out.blobs["k.bin"] = data`` change only the copy, so the
assignment was lost without a word. Through this view it changes the output,
with the same checks as assigning a whole mapping.
"""
from collections.abc import MutableMapping


class CompilerOutputBlobs(MutableMapping):
    """File name -> bytes of one CompilerOutput; changes go to the output."""

    __slots__ = ("_output",)

    def __init__(self, output):
        self._output = output

    def __getitem__(self, name):
        return self._output._blob(name)  # KeyError when absent

    def __setitem__(self, name, data):
        self._output._set_blob(name, data)  # InvalidArgument for anything but str -> bytes

    def __delitem__(self, name):
        self._output._del_blob(name)

    def __iter__(self):
        return iter(self._output._blob_names())  # a snapshot: the loop may change the blobs

    def __len__(self):
        return self._output._blob_count()

    def __repr__(self):
        return repr(dict(self.items()))
