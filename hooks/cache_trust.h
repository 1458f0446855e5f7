// Which files the page cache has been serving whole, across their fds.
//
// A regular file's reads from a fiber go through preadv2(RWF_NOWAIT) until
// the cache has served FdRecord::kTrustCache of them whole in a row, and
// then are the plain calls (hooks_files.cpp, read_file). That count was the
// fd's own, so a file opened, read to its end and closed again and again (a
// configuration file, a static page) started over at every open: each of
// its reads took preadv2's longer vectored path, and the short one at the
// end a second read to tell the end of the file from a page not cached.
// The count is now kept for the file as well, over all its fds: a new fd
// of a file whose last kTrustCache reads the cache served whole starts
// trusted, and a read the cache could not serve, or that sysmon judged
// blocked, takes the file's trust away.
//
// A file is named by its key, 32 bits of a hash of its device, inode and
// change time, so that an inode number reused by a new file, or a file
// written since, is not taken for one that was trusted. The table is a
// fixed array of slots, each a key and its count in one word, without a
// lock: a key may push another out (that file starts over), and a stale or
// lost count, or two files of one key, only pick the other way to read,
// never a different result.
#pragma once

#include <sys/stat.h>

#include <cstdint>

namespace weft::detail {

// The key of the file `st` describes (never 0: 0 is "no file").
std::uint32_t cache_trust_key(const struct stat& st) noexcept;

// Whether the cache served the file's last FdRecord::kTrustCache reads
// (through any of its fds) whole.
bool cache_trusted(std::uint32_t key) noexcept;
// A read of the file that the cache served whole.
void cache_served(std::uint32_t key) noexcept;
// A read of the file waited for the disk (or was judged blocked).
void distrust_cache(std::uint32_t key) noexcept;

}  // namespace weft::detail
