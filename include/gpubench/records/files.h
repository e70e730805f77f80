// Files as the records need them written: whole or not at all (a temporary file and a rename),
// the work files a worker's spec and record travel in, and the clean-up of those a killed run
// left. Torch-free.
#pragma once

#include <string>

namespace gpubench {

/// Writes `content` to `path` through a temporary file in the same folder and a rename, so a
/// reader never sees half a file. The temporary file is new (O_EXCL), never reached through a
/// symbolic link (O_NOFOLLOW), and removed when anything fails; a symbolic link at `path` is
/// replaced, not followed. Throws AbortError (exit 4) when the file cannot be written: a
/// read-only folder, a full disk, a file size limit (with SIGXFSZ ignored, as the CLI does).
void write_file_atomically(const std::string& path, const std::string& content);
/// Removes the temporary files of write_file_atomically(path) that a killed gpubench left
/// (those whose process is gone).
void remove_stale_temp_files(const std::string& path);
/// Throws ConfigError now if `path` could not be written later (so a run fails before it
/// measures anything, not after).
void check_writable(const std::string& path, const std::string& flag);

/// A new, empty work file $TMPDIR/gpubench-TAG-PID-XXXXXX (/tmp without TMPDIR) for a worker's
/// spec or record, PID this process's: the one name remove_stale_work_files knows. Throws
/// AbortError (exit 4) when none can be created.
std::string make_work_file(const char* tag);

/// Removes from `folder` (the workers' TMPDIR) the work files of runs and workers that were
/// killed before they could: gpubench-spec-PID-*, gpubench-out-PID-* whose run PID is gone,
/// and write_file_atomically's .gpubench-*.gpubench-tmp.PID.* whose writer is gone. A name
/// that does not have that shape is left alone (it may be a live run's). Returns how many it
/// removed.
int remove_stale_work_files(const std::string& folder);

/// Current UTC time as ISO 8601 ("2026-11-30T02:37:00Z").
std::string utc_now();

}  // namespace gpubench
