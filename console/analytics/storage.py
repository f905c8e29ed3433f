"""Files of the export and of job results, on a local disk or a Hadoop-compatible store.

pyarrow's file systems cover the local disk, S3 and HDFS with one interface. Spark
names S3 `s3a://`; pyarrow names it `s3://`: the same bucket either way.
"""

from __future__ import annotations

from pathlib import Path

from pyarrow import fs as pafs


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(file system, path inside it) for a folder URI or a plain local path."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).resolve())
    if uri.startswith("s3a://"):
        uri = "s3://" + uri[len("s3a://") :]
    return pafs.FileSystem.from_uri(uri)


def spark_uri(uri: str) -> str:
    """The same location as Spark should be given it."""
    return str(Path(uri).resolve()) if "://" not in uri else uri


def join(*parts: str) -> str:
    return "/".join(part.strip("/") if i else part.rstrip("/") for i, part in enumerate(parts))


def exists(filesystem: pafs.FileSystem, path: str) -> bool:
    return filesystem.get_file_info(path).type != pafs.FileType.NotFound


def list_files(filesystem: pafs.FileSystem, folder: str) -> list[str]:
    if not exists(filesystem, folder):
        return []
    return sorted(
        info.path
        for info in filesystem.get_file_info(pafs.FileSelector(folder))
        if info.type == pafs.FileType.File
    )


def delete_folder(filesystem: pafs.FileSystem, folder: str) -> None:
    if exists(filesystem, folder):
        filesystem.delete_dir(folder)
