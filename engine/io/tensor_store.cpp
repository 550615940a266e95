// Crash-consistent tensor store over preallocated extent files (see tensor_store.h).
#include "engine/io/tensor_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/units.h"
#include "engine/io/atomic_file.h"
#include "engine/io/crc32c.h"
#include "spec/json_text.h"

namespace memwall::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "memwall-tensor-store";
constexpr int kVersion = 1;
constexpr std::uint64_t kAlign = 4096;  // region alignment: direct I/O on 512-byte and 4 KiB devices

std::string extent_name(int k) {
  return "extent-" + std::to_string(k) + ".dat";
}

std::vector<std::uint32_t> checksums(const void* data, std::uint64_t bytes, std::uint64_t block) {
  std::vector<std::uint32_t> out;
  const auto* p = static_cast<const char*>(data);
  for (std::uint64_t off = 0; off < bytes; off += block) {
    out.push_back(crc32c(p + off, static_cast<std::size_t>(std::min(block, bytes - off))));
  }
  return out;
}

}  // namespace

std::uint64_t TensorStore::reserved(std::uint64_t bytes) const {
  return std::max<std::uint64_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
}

Status TensorStore::open_extents(bool create) {
  free_.clear();  // (grown a file at a time: an index's count is trusted only as far as its files exist)
  for (int k = 0; k < extent_count_; ++k) {
    const std::string path = root_ + "/" + extent_name(k);
    std::vector<std::string> warnings;
    Result<std::unique_ptr<File>> f = File::open(path, OpenMode::kReadWrite, create, true, &warnings);
    if (!f.is_ok()) return f.status();
    if (!create) {
      Result<std::uint64_t> size = (*f)->size();
      if (!size.is_ok()) return size.status();
      if (*size < extent_bytes_) {
        return Status::io_error(path + ": extent is " + std::to_string(*size) + " bytes, the index expects " +
                                std::to_string(extent_bytes_));
      }
    }
    extents_.push_back(std::move(*f));
    free_.emplace_back()[0] = extent_bytes_;
  }
  return Status::ok();
}

Result<std::unique_ptr<TensorStore>> TensorStore::create(const StoreOptions& opt, AsyncIo& io) {
  if (opt.capacity_bytes == 0 || opt.extent_bytes < kAlign || opt.extent_bytes % kAlign != 0 ||
      opt.checksum_block == 0) {
    return Status::invalid_argument("tensor store: capacity must be > 0 and extent_bytes a multiple of 4096");
  }
  const std::string root = opt.dir + "/rank" + std::to_string(opt.rank);
  std::error_code ec;
  if (fs::exists(root + "/index.json", ec)) {
    return Status::failed_precondition(root + ": a tensor store already exists here (open it instead)");
  }
  fs::create_directories(root, ec);
  if (ec) return Status::io_error(root + ": cannot create directory: " + ec.message());
  std::unique_ptr<TensorStore> s(new TensorStore(root, io));
  s->extent_bytes_ = opt.extent_bytes;
  s->extent_count_ = static_cast<int>((opt.capacity_bytes + opt.extent_bytes - 1) / opt.extent_bytes);
  s->checksums_ = opt.checksums;
  s->durable_ = opt.durable;
  s->checksum_block_ = opt.checksum_block;
  auto cleanup = [&](const Status& st) -> Status {
    s->extents_.clear();
    for (int k = 0; k < s->extent_count_; ++k) fs::remove(root + "/" + extent_name(k), ec);
    return st;
  };
  if (Status st = s->open_extents(true); !st.is_ok()) return cleanup(st);
  // Write every extent once: later writes are overwrites of allocated blocks (faster, and never ENOSPC).
  const std::size_t chunk = 16u << 20;
  std::unique_ptr<char, decltype(&std::free)> zeros(static_cast<char*>(alloc_aligned(chunk)), &std::free);
  std::memset(zeros.get(), 0, chunk);
  for (auto& f : s->extents_) {
    for (std::uint64_t off = 0; off < s->extent_bytes_; off += chunk) {
      io.write(*f, zeros.get(),
               static_cast<std::size_t>(std::min<std::uint64_t>(chunk, s->extent_bytes_ - off)), off);
    }
    if (Status st = io.wait_all(); !st.is_ok())
      return cleanup(Status::io_error("tensor store: preallocating " + f->path() + ": " + st.message()));
    if (Status st = f->sync(); !st.is_ok()) return cleanup(st);
  }
  if (Status st = s->write_index(); !st.is_ok()) return cleanup(st);
  return s;
}

Result<std::unique_ptr<TensorStore>> TensorStore::open(const std::string& dir, int rank, AsyncIo& io) {
  const std::string root = dir + "/rank" + std::to_string(rank);
  const std::string index = root + "/index.json";
  std::ifstream in(index);
  if (!in) return Status::not_found(index + ": no tensor store here");
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {  // (a syntax error, or a number out of a double's range)
    return Status::io_error(index + ": corrupt index: " + json_error_text(e));
  }
  const auto format = j.is_object() ? j.find("format") : j.end();
  if (format == j.end() || *format != kFormat)
    return Status::invalid_argument(index + ": not a memwall tensor store index");
  const auto version = j.find("version");
  if (version == j.end() || *version != kVersion) {
    return Status::invalid_argument(index + ": version " + (version == j.end() ? "(none)" : version->dump()) +
                                    " is not supported; this memwall reads version " +
                                    std::to_string(kVersion));
  }
  // A size or count of the index (key `key` of `o`, shown as `shown`) into `out`: an integer from `least` to
  // `most` (read as unsigned, the library would wrap -5 round to 2^64 - 5).
  const auto count = [&](const json& o, const char* key, const std::string& shown, std::uint64_t least,
                         std::uint64_t most, std::uint64_t& out) -> Status {
    const auto it = o.is_object() ? o.find(key) : o.end();
    if (it == o.end() || !it->is_number_unsigned() || it->get<std::uint64_t>() < least ||
        it->get<std::uint64_t>() > most) {
      return Status::io_error(index + ": corrupt index: '" + shown + "' is " +
                              (it == o.end() ? "missing" : it->dump()) + "; allowed: an integer " +
                              std::to_string(least) + ".." + std::to_string(most));
    }
    out = it->get<std::uint64_t>();
    return Status::ok();
  };
  constexpr std::uint64_t kMost = std::numeric_limits<std::int64_t>::max();
  std::unique_ptr<TensorStore> s(new TensorStore(root, io));
  try {
    MW_RETURN_IF_ERROR(count(j, "extent_bytes", "extent_bytes", kAlign, kMost, s->extent_bytes_));
    if (s->extent_bytes_ % kAlign != 0) {
      return Status::io_error(index + ": corrupt index: 'extent_bytes' " + std::to_string(s->extent_bytes_) +
                              " is not a multiple of " + std::to_string(kAlign));
    }
    std::uint64_t extents = 0;
    MW_RETURN_IF_ERROR(count(j, "extents", "extents", 1, std::numeric_limits<int>::max(), extents));
    s->extent_count_ = static_cast<int>(extents);
    s->checksums_ = j.at("checksums").get<bool>();
    MW_RETURN_IF_ERROR(count(j, "checksum_block", "checksum_block", 1, kMost, s->checksum_block_));
    MW_RETURN_IF_ERROR(s->open_extents(false));
    if (!j.contains("tensors") || !j["tensors"].is_object()) {
      return Status::io_error(index + ": corrupt index: 'tensors' is " +
                              (j.contains("tensors") ? j["tensors"].dump() : std::string("missing")) +
                              "; allowed: an object of {name: location}");
    }
    for (auto it = j.at("tensors").begin(); it != j.at("tensors").end(); ++it) {
      const std::string field = "tensors." + it.key() + ".";
      Location loc;
      std::uint64_t extent = 0;
      MW_RETURN_IF_ERROR(count(it.value(), "extent", field + "extent", 0, kMost, extent));
      MW_RETURN_IF_ERROR(count(it.value(), "offset", field + "offset", 0, kMost, loc.offset));
      MW_RETURN_IF_ERROR(count(it.value(), "bytes", field + "bytes", 0, kMost, loc.bytes));
      if (const auto crc = it.value().find("crc32c"); crc != it.value().end()) {
        if (!crc->is_array() || !std::all_of(crc->begin(), crc->end(), [](const json& c) {
              return c.is_number_unsigned() && c.get<std::uint64_t>() <= 0xffffffffu;
            })) {
          return Status::io_error(index + ": corrupt index: '" + field + "crc32c' is " + crc->dump() +
                                  "; allowed: a list of 32-bit checksums");
        }
        loc.crc = crc->get<std::vector<std::uint32_t>>();
      }
      if (extent >= extents || loc.offset > s->extent_bytes_ || loc.bytes > s->extent_bytes_ - loc.offset) {
        return Status::io_error(index + ": tensor '" + it.key() + "' lies outside the extents");
      }
      loc.extent = static_cast<int>(extent);
      // Carve the region out of the free map.
      auto& fm = s->free_[static_cast<std::size_t>(loc.extent)];
      const std::uint64_t need = s->reserved(loc.bytes);
      auto f = fm.upper_bound(loc.offset);
      if (f == fm.begin()) return Status::io_error(index + ": tensor '" + it.key() + "' overlaps another");
      --f;
      const std::uint64_t fo = f->first, fs_ = f->second;
      if (loc.offset + need > fo + fs_)
        return Status::io_error(index + ": tensor '" + it.key() + "' overlaps another");
      fm.erase(f);
      if (loc.offset > fo) fm[fo] = loc.offset - fo;
      if (fo + fs_ > loc.offset + need) fm[loc.offset + need] = fo + fs_ - (loc.offset + need);
      s->tensors_[it.key()] = loc;
    }
  } catch (const json::exception& e) {
    return Status::io_error(index + ": corrupt index: " + json_error_text(e));
  }
  s->committed_ = s->tensors_;
  return s;
}

TensorStore::~TensorStore() {
  (void)io_.wait_all();
}

Result<TensorStore::Location> TensorStore::allocate(std::uint64_t bytes) {
  const std::uint64_t need = reserved(bytes);
  if (need > extent_bytes_) {
    return Status::invalid_argument(
        strprintf("tensor store %s: a tensor of %s does not fit one %s extent; create the "
                  "store with a larger extent size",
                  root_.c_str(), format_bytes(static_cast<double>(bytes)).c_str(),
                  format_bytes(static_cast<double>(extent_bytes_)).c_str()));
  }
  std::uint64_t largest = 0;
  for (std::size_t k = 0; k < free_.size(); ++k) {
    for (auto it = free_[k].begin(); it != free_[k].end(); ++it) {
      largest = std::max(largest, it->second);
      if (it->second < need) continue;
      Location loc;
      loc.extent = static_cast<int>(k);
      loc.offset = it->first;
      loc.bytes = bytes;
      const std::uint64_t rest = it->second - need, at = it->first + need;
      free_[k].erase(it);
      if (rest > 0) free_[k][at] = rest;
      return loc;
    }
  }
  return Status::out_of_memory(
      strprintf("tensor store %s is full: needs %s, the largest free region is %s (%s free "
                "of %s)",
                root_.c_str(), format_bytes(static_cast<double>(need)).c_str(),
                format_bytes(static_cast<double>(largest)).c_str(),
                format_bytes(static_cast<double>(free_bytes_locked())).c_str(),
                format_bytes(static_cast<double>(capacity_bytes())).c_str()));
}

void TensorStore::release(const Location& loc) {
  auto& fm = free_[static_cast<std::size_t>(loc.extent)];
  std::uint64_t off = loc.offset, size = reserved(loc.bytes);
  auto next = fm.lower_bound(off);
  if (next != fm.end() && off + size == next->first) {  // merge with the following region
    size += next->second;
    next = fm.erase(next);
  }
  if (next != fm.begin()) {  // and with the preceding one
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      size += prev->second;
      fm.erase(prev);
    }
  }
  fm[off] = size;
}

void TensorStore::retire(const std::string& /*name*/, const Location& loc) {
  // A committed version stays readable after a crash until the next commit, and a staged one may still be
  // being read by another thread: both are released by the next commit.
  pending_release_.push_back(loc);
}

Status TensorStore::write(const std::string& name, const void* data, std::uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  Result<Location> loc = allocate(bytes);
  lock.unlock();
  if (!loc.is_ok()) return loc.status();
  // The I/O and checksums run outside the index lock, so a reader and a writer thread overlap.
  File& f = *extents_[static_cast<std::size_t>(loc->extent)];
  Status st = io_.wait(io_.write(f, data, static_cast<std::size_t>(bytes), loc->offset));
  std::vector<std::uint32_t> crc;
  if (st.is_ok() && checksums_) crc = checksums(data, bytes, checksum_block_);
  lock.lock();
  if (!st.is_ok()) {
    release(*loc);  // the committed version stays as it was
    return Status::io_error("tensor store: writing '" + name + "': " + st.message());
  }
  loc->crc = std::move(crc);
  if (auto it = tensors_.find(name); it != tensors_.end()) retire(name, it->second);
  tensors_[name] = *loc;
  dirty_extents_.push_back(loc->extent);
  return Status::ok();
}

Status TensorStore::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::not_found("tensor store: no tensor '" + name + "'");
  retire(name, it->second);
  tensors_.erase(it);
  return Status::ok();
}

Status TensorStore::commit() {
  MW_RETURN_IF_ERROR(io_.wait_all());
  std::lock_guard<std::mutex> lock(mu_);
  std::sort(dirty_extents_.begin(), dirty_extents_.end());
  dirty_extents_.erase(std::unique(dirty_extents_.begin(), dirty_extents_.end()), dirty_extents_.end());
  if (durable_) {
    for (int k : dirty_extents_) MW_RETURN_IF_ERROR(extents_[static_cast<std::size_t>(k)]->sync());
    MW_RETURN_IF_ERROR(write_index());
  }
  dirty_extents_.clear();
  committed_ = tensors_;
  for (const Location& loc : pending_release_) release(loc);
  pending_release_.clear();
  return Status::ok();
}

void TensorStore::rollback() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::pair<int, std::uint64_t>> kept;
  for (const auto& [name, c] : committed_) kept.insert({c.extent, c.offset});
  auto committed = [&kept](const Location& loc) { return kept.count({loc.extent, loc.offset}) > 0; };
  // Staged versions: the current ones that were not committed, and the replaced ones in between.
  for (const auto& [name, loc] : tensors_) {
    if (!committed(loc)) release(loc);
  }
  for (const Location& loc : pending_release_) {
    if (!committed(loc)) release(loc);
  }
  pending_release_.clear();
  dirty_extents_.clear();
  tensors_ = committed_;
}

Status TensorStore::put(const std::string& name, const void* data, std::uint64_t bytes) {
  MW_RETURN_IF_ERROR(write(name, data, bytes));
  return commit();
}

Status TensorStore::get(const std::string& name, void* data, std::uint64_t bytes) {
  Location loc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      return Status::not_found("tensor store " + root_ + ": no tensor '" + name + "'");
    loc = it->second;  // replaced versions stay until the next commit, so this one stays readable
  }
  if (bytes != loc.bytes) {
    return Status::invalid_argument(
        strprintf("tensor store %s: '%s' has %llu bytes, the read asks for %llu", root_.c_str(), name.c_str(),
                  static_cast<unsigned long long>(loc.bytes), static_cast<unsigned long long>(bytes)));
  }
  File& f = *extents_[static_cast<std::size_t>(loc.extent)];
  MW_RETURN_IF_ERROR(io_.wait(io_.read(f, data, static_cast<std::size_t>(bytes), loc.offset)));
  if (checksums_ && !loc.crc.empty()) {
    const std::vector<std::uint32_t> now = checksums(data, bytes, checksum_block_);
    for (std::size_t b = 0; b < now.size(); ++b) {
      if (b >= loc.crc.size() || now[b] != loc.crc[b]) {
        return Status::io_error(
            strprintf("tensor store %s: '%s' is corrupt: checksum mismatch in block %zu (file %s, "
                      "offset %llu)",
                      root_.c_str(), name.c_str(), b, f.path().c_str(),
                      static_cast<unsigned long long>(loc.offset + b * checksum_block_)));
      }
    }
  }
  return Status::ok();
}

Result<std::uint64_t> TensorStore::size_of(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::not_found("tensor store " + root_ + ": no tensor '" + name + "'");
  return it->second.bytes;
}

std::vector<std::string> TensorStore::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [n, loc] : tensors_) out.push_back(n);
  return out;
}

std::uint64_t TensorStore::capacity_bytes() const {
  return extent_bytes_ * static_cast<std::uint64_t>(extent_count_);
}

std::uint64_t TensorStore::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_locked();
}

std::uint64_t TensorStore::free_bytes_locked() const {
  std::uint64_t n = 0;
  for (const auto& fm : free_) {
    for (const auto& [off, size] : fm) n += size;
  }
  return n;
}

Status TensorStore::write_index() {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["extent_bytes"] = extent_bytes_;
  j["extents"] = extent_count_;
  j["checksums"] = checksums_;
  j["checksum_block"] = checksum_block_;
  json tensors = json::object();
  for (const auto& [name, loc] : tensors_) {
    json t = {{"extent", loc.extent}, {"offset", loc.offset}, {"bytes", loc.bytes}};
    if (!loc.crc.empty()) t["crc32c"] = loc.crc;
    tensors[name] = t;
  }
  j["tensors"] = tensors;
  const std::string index = root_ + "/index.json";
  const std::string tmp = index + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump();
    out.flush();
    if (!out) return Status::io_error(tmp + ": write failed (disk full?); the previous index is intact");
  }
  MW_RETURN_IF_ERROR(fsync_path(tmp, false));
  if (std::rename(tmp.c_str(), index.c_str()) != 0) {
    return Status::io_error(index + ": rename: " + std::strerror(errno));
  }
  return fsync_path(root_, true);
}

}  // namespace memwall::io
