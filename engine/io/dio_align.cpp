// Direct-I/O alignment of an open file from statx(STATX_DIOALIGN) (Linux 6.1+); kept in its own file because
// <linux/stat.h> and glibc's <sys/stat.h> both define struct statx.
#include <fcntl.h>
#include <linux/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

namespace memwall::io::detail {

// Returns false when the kernel or filesystem does not report it.
bool dio_alignment(int fd, std::size_t* offset_align, std::size_t* mem_align) {
  struct statx st {};
  if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) != 0) return false;
  if ((st.stx_mask & STATX_DIOALIGN) == 0 || st.stx_dio_offset_align == 0) return false;
  *offset_align = st.stx_dio_offset_align;
  *mem_align = st.stx_dio_mem_align;
  return true;
}

}  // namespace memwall::io::detail
