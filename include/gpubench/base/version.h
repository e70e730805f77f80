// The gpubench version and the git commit it was built from (written at build time by
// cmake/GitVersion.cmake; "-dirty" marks uncommitted changes).
#pragma once

namespace gpubench::version_info {
extern const char* const kVersion;
extern const char* const kGitCommit;
}  // namespace gpubench::version_info
