#pragma once
// An episode's scratch folder and the verifier's side of the trust boundary (issue 14 items 9, 11, 12).
//
// Folder: `<scratch_root>/ep-<server pid>-<server start time>-<sandbox uid>-XXXXXX`. The name says whose it
// is, so a server starting up removes the folders of servers that died (pid gone, or reused by a process
// with another start time) and kills what their sandbox uid left running, never a live server's folder.
// When we are root the folder is a tmpfs of `disk_bytes` (mode 0711): everything the agent and the
// verifier write is bounded, and nothing reaches the host disk; it is unmounted when the episode ends.
// (Scratch roots must not be shared between PID namespaces: a pid is only meaningful in one.)
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace crl::shell {

struct Scratch {
  std::string path;
  bool quota = false;  // a size-limited tmpfs
  std::string why;     // why not (not root, mount failed)
};
// Throws crl::Error naming scratch_root when no folder can be made.
Scratch make_scratch(const std::string& scratch_root, int uid, int64_t disk_bytes);
// Unmounts (when it is a mount) and removes the folder; safe on agent-made contents (no link is followed).
void remove_scratch(const std::string& path);
// Removes the scratch folders under `scratch_root` whose owner process is dead; returns how many.
int sweep_stale_scratch(const std::string& scratch_root);
// Once per scratch root and process: the sweep above (the first reset of a server does it).
void sweep_stale_scratch_once(const std::string& scratch_root);

// lchown of every entry below `root` that lives on root's file system and is not a hard link of a file
// (a hard link made by the agent could name a file outside; chown would follow the inode).
void chown_tree(const std::string& root, int uid, int gid);

// Reads `folder/name1/name2/...` without following any symbolic link on the way, only a regular file, at
// most `cap` bytes (larger files are refused). nullopt with `why` otherwise.
std::optional<std::string> read_small_file_nofollow(const std::string& folder, const std::string& relative,
                                                    size_t cap, std::string* why);

// The start time of a process (field 22 of /proc/PID/stat), 0 when it does not exist.
uint64_t process_start_time(pid_t pid);

}  // namespace crl::shell
