"""The read-only HDF5 view that the feature readers (regions, video) share.

The file is checked when opened: it must keep all its data inside itself (`refuse_outside_data`: a feature file
from a DVC remote must not make the reader open other files of the machine), then the subclass's `_validate`
checks its layout. The handle is opened lazily and left out of
pickles, so each process that receives the object (DataLoader workers) opens its own.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path

import h5py

from ..io import InputError


def one_line(err: BaseException) -> str:
    """An HDF5 error as one short line (h5py's messages span several)."""
    return " ".join(str(err).split())[:200]


def refuse_outside_data(h5: h5py.File, where: str) -> None:
    """InputError unless every object of the file keeps its data inside it: an external link or an external or
    virtual dataset would make the reader open other files of this machine (`where` names the file)."""
    def outside(name: str, link) -> str | None:
        if isinstance(link, h5py.ExternalLink):
            return f"'{name}' is a link to {link.filename}"
        node = h5.get(name) if isinstance(link, h5py.HardLink) else None
        if isinstance(node, h5py.Dataset) and (node.is_virtual or node.external):
            return f"dataset '{name}' keeps its data in other files"
        return None

    reason = h5.visititems_links(outside)
    if reason:
        raise InputError(f"{where}: refused, {reason}")


class ReadOnlyHDF5(ABC):
    description = "HDF5 file"  # how messages name the file, e.g. "region feature file"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"missing {self.description}: {self.path}")
        self._file: h5py.File | None = None
        try:
            refuse_outside_data(self._h5(), f"{self.description} {self.path}")
            self._validate(self._h5())
        except BaseException:
            self.close()
            raise

    @abstractmethod
    def _validate(self, h5: h5py.File) -> None:
        """Check the file's layout; raise InputError naming what is wrong."""

    def _h5(self) -> h5py.File:
        if self._file is None:
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as err:
                raise InputError(f"{self.description} {self.path} is truncated or not HDF5 ({one_line(err)})") from None
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"] = None
        return state
