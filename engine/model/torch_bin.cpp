// torch.save's zip format read as a tensor index: the zip's central directory (Zip64 too), then data.pkl run
// on a pickle machine that builds only what a state dict is made of.
#include "engine/model/torch_bin.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "base/units.h"
#include "engine/io/read_file.h"

namespace memwall::model {

namespace {

constexpr std::size_t kMaxPickleBytes = 256u << 20;

std::uint64_t le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct ZipEntry {
  std::uint64_t data = 0, size = 0;  // where its bytes start in the file, and how many
};

// The archive's entries by name (stored ones only: a compressed entry is an error).
Status read_zip(const std::string& path, int fd, std::size_t size, std::map<std::string, ZipEntry>& out) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument(path + ": not a PyTorch checkpoint zip (" + why + ")");
  };
  // The end of central directory record: the last 22 bytes, after at most a 65535-byte comment.
  const std::size_t tail = std::min<std::size_t>(size, 22 + 65535);
  if (tail < 22) return bad("too short");
  std::vector<unsigned char> t(tail);
  MW_RETURN_IF_ERROR(io::pread_full(fd, t.data(), tail, size - tail, path));
  std::size_t at = tail;
  for (std::size_t i = tail - 22 + 1; i-- > 0;) {
    if (le(&t[i], 4) == 0x06054b50) {
      at = i;
      break;
    }
  }
  if (at == tail) return bad("no end of central directory: truncated?");
  std::uint64_t entries = le(&t[at + 10], 2), cd_size = le(&t[at + 12], 4), cd_offset = le(&t[at + 16], 4);
  const std::uint64_t eocd = size - tail + at;
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    // Zip64 (files over 4 GiB): a locator just before the record points at the Zip64 end record.
    unsigned char loc[20], rec[56];
    if (eocd < 20) return bad("Zip64 sizes without a Zip64 locator");
    MW_RETURN_IF_ERROR(io::pread_full(fd, loc, 20, eocd - 20, path));
    const std::uint64_t where = le(loc + 8, 8);
    if (le(loc, 4) != 0x07064b50 || where + 56 > size) return bad("Zip64 sizes without a Zip64 locator");
    MW_RETURN_IF_ERROR(io::pread_full(fd, rec, 56, where, path));
    if (le(rec, 4) != 0x06064b50) return bad("damaged Zip64 end record");
    entries = le(rec + 32, 8);
    cd_size = le(rec + 40, 8);
    cd_offset = le(rec + 48, 8);
  }
  if (cd_offset > size || cd_size > size - cd_offset || entries > cd_size / 46)
    return bad("its central directory lies outside the file: truncated?");
  std::vector<unsigned char> cd(cd_size);
  MW_RETURN_IF_ERROR(io::pread_full(fd, cd.data(), cd.size(), cd_offset, path));
  std::size_t p = 0;
  for (std::uint64_t e = 0; e < entries; ++e) {
    if (p + 46 > cd.size() || le(&cd[p], 4) != 0x02014b50) return bad("damaged central directory");
    const std::uint64_t method = le(&cd[p + 10], 2);
    std::uint64_t packed = le(&cd[p + 20], 4), unpacked = le(&cd[p + 24], 4), local = le(&cd[p + 42], 4);
    const std::size_t name_len = le(&cd[p + 28], 2), extra_len = le(&cd[p + 30], 2),
                      comment_len = le(&cd[p + 32], 2);
    const std::size_t extra = p + 46 + name_len, next = extra + extra_len + comment_len;
    if (next > cd.size()) return bad("damaged central directory");
    const std::string name(reinterpret_cast<const char*>(&cd[p + 46]), name_len);
    // Zip64's extra field: the sizes and the offset that did not fit in 32 bits, in this order.
    for (std::size_t x = extra; x + 4 <= extra + extra_len;) {
      const std::size_t id = le(&cd[x], 2), len = le(&cd[x + 2], 2), end = x + 4 + len;
      if (end > extra + extra_len) break;
      if (id == 1) {
        std::size_t f = x + 4;
        for (std::uint64_t* v : {&unpacked, &packed, &local}) {
          if (*v == 0xFFFFFFFF && f + 8 <= end) {
            *v = le(&cd[f], 8);
            f += 8;
          }
        }
      }
      x = end;
    }
    if (method != 0) {
      return Status::invalid_argument(path + ": entry '" + name + "' is compressed (method " +
                                      std::to_string(method) +
                                      "); allowed: stored entries, as torch.save writes them");
    }
    unsigned char lh[30];
    if (packed != unpacked || local > size || size - local < 30) return bad("damaged entry '" + name + "'");
    MW_RETURN_IF_ERROR(io::pread_full(fd, lh, 30, local, path));
    if (le(lh, 4) != 0x04034b50) return bad("damaged local header of '" + name + "'");
    const std::uint64_t data = local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
    if (data > size || packed > size - data) {
      return Status::invalid_argument(path + ": entry '" + name + "' runs past the end of the " +
                                      std::to_string(size) + "-byte file (truncated?)");
    }
    out[name] = {data, packed};
    p = next;
  }
  return Status::ok();
}

// A pickled value: just the kinds a state dict is made of.
struct Obj;
using Ref = std::shared_ptr<Obj>;
struct Obj {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  Kind kind = Kind::kNone;
  long long i = 0;
  std::string s;                          // a string; a global's "module.name"; a storage's key
  std::vector<Ref> items;                 // a tuple's or list's
  std::vector<std::pair<Ref, Ref>> dict;  // a dict's, in order
  // A storage: its dtype (safetensors' name), element bytes and elements; a tensor: its storage, offset
  // (elements) and shape.
  std::string dtype;
  int element_bytes = 0;
  std::uint64_t numel = 0;
  Ref storage;
  std::uint64_t offset = 0;
  std::vector<long long> shape;
};

Ref make(Obj::Kind k) {
  auto o = std::make_shared<Obj>();
  o->kind = k;
  return o;
}

// torch's storage types: safetensors' dtype name and element bytes.
bool storage_dtype(const std::string& global, std::string& dtype, int& bytes) {
  static const std::map<std::string, std::pair<const char*, int>> types = {
      {"torch.FloatStorage", {"F32", 4}},     {"torch.HalfStorage", {"F16", 2}},
      {"torch.BFloat16Storage", {"BF16", 2}}, {"torch.DoubleStorage", {"F64", 8}},
      {"torch.LongStorage", {"I64", 8}},      {"torch.IntStorage", {"I32", 4}},
      {"torch.ShortStorage", {"I16", 2}},     {"torch.CharStorage", {"I8", 1}},
      {"torch.ByteStorage", {"U8", 1}},       {"torch.BoolStorage", {"BOOL", 1}}};
  const auto it = types.find(global);
  if (it == types.end()) return false;
  dtype = it->second.first;
  bytes = it->second.second;
  return true;
}

// Runs data.pkl: the state dict it builds, or why not.
class Unpickler {
 public:
  Unpickler(std::string path, const std::string& bytes) : path_(std::move(path)), b_(bytes) {}

  Result<Ref> run() {
    while (pos_ < b_.size()) {
      const auto op = static_cast<unsigned char>(b_[pos_++]);
      Status st = step(op);
      if (!st.is_ok()) return st;
      if (done_) return result_;
    }
    return error("ends without STOP (truncated?)");
  }

 private:
  Status error(const std::string& why) const { return Status::invalid_argument(path_ + ": data.pkl " + why); }
  bool take(std::size_t n) const { return pos_ + n <= b_.size(); }
  std::uint64_t uint(int n) {
    const std::uint64_t v = le(reinterpret_cast<const unsigned char*>(b_.data()) + pos_, n);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  Result<Ref> pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) return error("pops an empty stack");
    Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  // The values above the last mark, the mark removed.
  Result<std::vector<Ref>> pop_mark() {
    if (marks_.empty()) return error("has no mark to pop to");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Status push_str(std::size_t n) {
    if (!take(n)) return error("string runs past the end");
    Ref r = make(Obj::Kind::kStr);
    r->s = b_.substr(pos_, n);
    pos_ += n;
    stack_.push_back(std::move(r));
    return Status::ok();
  }
  Status push_int(long long v) {
    Ref r = make(Obj::Kind::kInt);
    r->i = v;
    stack_.push_back(std::move(r));
    return Status::ok();
  }
  Status memo_put(std::uint64_t key) {
    if (stack_.empty()) return error("memoizes an empty stack");
    memo_[key] = stack_.back();
    return Status::ok();
  }
  Status memo_get(std::uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) return error("reads memo entry " + std::to_string(key) + " it never stored");
    stack_.push_back(it->second);
    return Status::ok();
  }
  Status tuple_of(std::size_t n) {
    if (stack_.size() < n) return error("builds a tuple from an empty stack");
    Ref t = make(Obj::Kind::kTuple);
    t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    stack_.push_back(std::move(t));
    return Status::ok();
  }
  Status global(const std::string& module, const std::string& name) {
    const std::string g = module + "." + name;
    std::string dtype;
    int bytes = 0;
    if (g != "collections.OrderedDict" && g != "torch._utils._rebuild_tensor_v2" &&
        g != "torch._utils._rebuild_parameter" && !storage_dtype(g, dtype, bytes)) {
      return error("asks for " + g +
                   ", which a state dict of tensors does not need; refused without running it (allowed: "
                   "OrderedDict, torch._utils._rebuild_tensor_v2 and _rebuild_parameter, torch's storage "
                   "types)");
    }
    Ref r = make(Obj::Kind::kGlobal);
    r->s = g;
    stack_.push_back(std::move(r));
    return Status::ok();
  }
  // BINPERSID's id: ('storage', storage type, key, location, elements).
  Status persistent(const Ref& pid) {
    const auto& it = pid->items;
    if (pid->kind != Obj::Kind::kTuple || it.size() < 5 || it[0]->kind != Obj::Kind::kStr ||
        it[0]->s != "storage" || it[1]->kind != Obj::Kind::kGlobal || it[2]->kind != Obj::Kind::kStr ||
        it[4]->kind != Obj::Kind::kInt || it[4]->i < 0) {
      return error("has a persistent id that is not a storage's ('storage', type, key, location, size)");
    }
    Ref st = make(Obj::Kind::kStorage);
    if (!storage_dtype(it[1]->s, st->dtype, st->element_bytes))
      return error("has a storage of type " + it[1]->s + "; allowed: torch's storage types");
    st->s = it[2]->s;
    st->numel = static_cast<std::uint64_t>(it[4]->i);
    stack_.push_back(std::move(st));
    return Status::ok();
  }
  Status reduce(const Ref& fn, const Ref& args) {
    if (fn->kind != Obj::Kind::kGlobal || args->kind != Obj::Kind::kTuple)
      return error("calls something that is not a global with a tuple of arguments");
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      stack_.push_back(make(Obj::Kind::kDict));
      return Status::ok();
    }
    if (fn->s == "torch._utils._rebuild_parameter") {
      if (a.empty() || a[0]->kind != Obj::Kind::kTensor)
        return error("rebuilds a parameter without a tensor");
      stack_.push_back(a[0]);
      return Status::ok();
    }
    if (fn->s != "torch._utils._rebuild_tensor_v2") return error("calls " + fn->s);
    // (storage, storage offset, size, stride, requires_grad, backward hooks[, metadata])
    if (a.size() < 4 || a[0]->kind != Obj::Kind::kStorage || a[1]->kind != Obj::Kind::kInt || a[1]->i < 0 ||
        a[2]->kind != Obj::Kind::kTuple || a[3]->kind != Obj::Kind::kTuple ||
        a[2]->items.size() != a[3]->items.size()) {
      return error("rebuilds a tensor from arguments that are not (storage, offset, size, stride, ...)");
    }
    Ref t = make(Obj::Kind::kTensor);
    t->storage = a[0];
    t->offset = static_cast<std::uint64_t>(a[1]->i);
    long long expected = 1;  // C order: each dimension's stride the product of the sizes after it
    const std::size_t dims = a[2]->items.size();
    t->shape.resize(dims);
    for (std::size_t d = dims; d-- > 0;) {
      const Ref& n = a[2]->items[d];
      const Ref& s = a[3]->items[d];
      if (n->kind != Obj::Kind::kInt || s->kind != Obj::Kind::kInt || n->i < 0)
        return error("rebuilds a tensor with a size or stride that is not a non-negative integer");
      if (n->i > 1 && s->i != expected) {
        return error(
            "holds a tensor that is not contiguous (strides of a view); allowed: contiguous "
            "tensors, as save_pretrained writes them");
      }
      t->shape[d] = n->i;
      expected *= std::max<long long>(n->i, 1);
    }
    stack_.push_back(std::move(t));
    return Status::ok();
  }

  Status step(unsigned char op) {
    switch (op) {
      case 0x80:  // PROTO
        if (!take(1)) return error("is truncated");
        ++pos_;
        return Status::ok();
      case 0x95:  // FRAME
        if (!take(8)) return error("is truncated");
        pos_ += 8;
        return Status::ok();
      case '}':
        stack_.push_back(make(Obj::Kind::kDict));
        return Status::ok();
      case ']':
        stack_.push_back(make(Obj::Kind::kList));
        return Status::ok();
      case ')':
        stack_.push_back(make(Obj::Kind::kTuple));
        return Status::ok();
      case 'N':
        stack_.push_back(make(Obj::Kind::kNone));
        return Status::ok();
      case 0x88:  // NEWTRUE
      case 0x89: {
        Ref r = make(Obj::Kind::kBool);
        r->i = op == 0x88 ? 1 : 0;
        stack_.push_back(std::move(r));
        return Status::ok();
      }
      case '(':
        marks_.push_back(stack_.size());
        return Status::ok();
      case 'q':
        if (!take(1)) return error("is truncated");
        return memo_put(uint(1));
      case 'r':
        if (!take(4)) return error("is truncated");
        return memo_put(uint(4));
      case 0x94:  // MEMOIZE
        return memo_put(memo_.size());
      case 'h':
        if (!take(1)) return error("is truncated");
        return memo_get(uint(1));
      case 'j':
        if (!take(4)) return error("is truncated");
        return memo_get(uint(4));
      case 'X':  // BINUNICODE
      case 'T':  // BINSTRING
        if (!take(4)) return error("is truncated");
        return push_str(uint(4));
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
        if (!take(1)) return error("is truncated");
        return push_str(uint(1));
      case 'K':
        if (!take(1)) return error("is truncated");
        return push_int(static_cast<long long>(uint(1)));
      case 'M':
        if (!take(2)) return error("is truncated");
        return push_int(static_cast<long long>(uint(2)));
      case 'J':
        if (!take(4)) return error("is truncated");
        return push_int(static_cast<std::int32_t>(uint(4)));
      case 0x8a: {  // LONG1: n bytes, little-endian two's complement
        if (!take(1)) return error("is truncated");
        const auto n = static_cast<int>(uint(1));
        if (n > 8 || !take(static_cast<std::size_t>(n))) return error("has an integer wider than 64 bits");
        std::uint64_t v = n > 0 ? uint(n) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign
        return push_int(static_cast<long long>(v));
      }
      case 'G': {  // BINFLOAT: 8 bytes big-endian (kept as its bits: a state dict's index reads no float)
        if (!take(8)) return error("is truncated");
        std::uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<unsigned char>(b_[pos_ + k]);
        pos_ += 8;
        Ref r = make(Obj::Kind::kFloat);
        r->i = static_cast<long long>(bits);
        stack_.push_back(std::move(r));
        return Status::ok();
      }
      case 'c': {  // GLOBAL: "module\nname\n"
        const std::size_t a = b_.find('\n', pos_), z = a == std::string::npos ? a : b_.find('\n', a + 1);
        if (z == std::string::npos) return error("is truncated");
        const std::string module = b_.substr(pos_, a - pos_), name = b_.substr(a + 1, z - a - 1);
        pos_ = z + 1;
        return global(module, name);
      }
      case 't': {
        auto items = pop_mark();
        if (!items.is_ok()) return items.status();
        Ref t = make(Obj::Kind::kTuple);
        t->items = std::move(items).value();
        stack_.push_back(std::move(t));
        return Status::ok();
      }
      case 0x85:
      case 0x86:
      case 0x87:
        return tuple_of(op - 0x84u);
      case 'Q': {  // BINPERSID
        auto pid = pop();
        if (!pid.is_ok()) return pid.status();
        return persistent(*pid);
      }
      case 'R': {
        auto args = pop();
        if (!args.is_ok()) return args.status();
        auto fn = pop();
        if (!fn.is_ok()) return fn.status();
        return reduce(*fn, *args);
      }
      case 'u': {  // SETITEMS
        auto items = pop_mark();
        if (!items.is_ok()) return items.status();
        if (stack_.empty() || stack_.back()->kind != Obj::Kind::kDict || items->size() % 2 != 0)
          return error("sets items on something that is not a dict");
        for (std::size_t k = 0; k < items->size(); k += 2)
          stack_.back()->dict.emplace_back((*items)[k], (*items)[k + 1]);
        return Status::ok();
      }
      case 's': {
        auto v = pop();
        if (!v.is_ok()) return v.status();
        auto k = pop();
        if (!k.is_ok()) return k.status();
        if (stack_.empty() || stack_.back()->kind != Obj::Kind::kDict)
          return error("sets an item on something that is not a dict");
        stack_.back()->dict.emplace_back(*k, *v);
        return Status::ok();
      }
      case 'e': {  // APPENDS
        auto items = pop_mark();
        if (!items.is_ok()) return items.status();
        if (stack_.empty() || stack_.back()->kind != Obj::Kind::kList)
          return error("appends to something that is not a list");
        for (Ref& r : *items) stack_.back()->items.push_back(std::move(r));
        return Status::ok();
      }
      case 'a': {
        auto v = pop();
        if (!v.is_ok()) return v.status();
        if (stack_.empty() || stack_.back()->kind != Obj::Kind::kList)
          return error("appends to something that is not a list");
        stack_.back()->items.push_back(*v);
        return Status::ok();
      }
      case 'b': {  // BUILD: an object's state (a state dict's _metadata): not needed
        auto state = pop();
        if (!state.is_ok()) return state.status();
        if (stack_.empty()) return error("builds on an empty stack");
        return Status::ok();
      }
      case '.': {
        auto r = pop();
        if (!r.is_ok()) return r.status();
        result_ = *r;
        done_ = true;
        return Status::ok();
      }
      default:
        return error(
            strprintf("has opcode 0x%02x at byte %zu, which a state dict of tensors does not use; "
                      "refused without running it",
                      op, pos_ - 1));
    }
  }

  std::string path_;
  const std::string& b_;
  std::size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::uint64_t, Ref> memo_;
  Ref result_;
  bool done_ = false;
};

}  // namespace

bool is_zip_magic(const unsigned char* first4) {
  return first4[0] == 'P' && first4[1] == 'K' && first4[2] == 3 && first4[3] == 4;
}

Status torch_checkpoint_index(const std::string& path, int fd, std::size_t size, nlohmann::json& header) {
  std::map<std::string, ZipEntry> zip;
  MW_RETURN_IF_ERROR(read_zip(path, fd, size, zip));
  // torch.save names every entry <archive>/...: the directory of its data.pkl.
  std::string prefix;
  const ZipEntry* pkl = nullptr;
  for (const auto& [name, e] : zip) {
    if (name == "data.pkl" || (name.size() > 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0)) {
      prefix = name.substr(0, name.size() - 8);
      pkl = &e;
      break;
    }
  }
  if (pkl == nullptr) {
    return Status::invalid_argument(path +
                                    ": a zip without data.pkl; allowed: a PyTorch checkpoint (torch.save)");
  }
  if (const auto order = zip.find(prefix + "byteorder"); order != zip.end() && order->second.size < 16) {
    std::string text(order->second.size, '\0');
    MW_RETURN_IF_ERROR(io::pread_full(fd, text.data(), text.size(), order->second.data, path));
    if (text != "little")
      return Status::invalid_argument(path + ": tensors saved " + text + "-endian; allowed: little-endian");
  }
  if (pkl->size > kMaxPickleBytes) {
    return Status::invalid_argument(path + ": data.pkl of " + format_bytes(static_cast<double>(pkl->size)) +
                                    " is more than a state dict's index needs");
  }
  std::string bytes(pkl->size, '\0');
  MW_RETURN_IF_ERROR(io::pread_full(fd, bytes.data(), bytes.size(), pkl->data, path));
  Unpickler u(path, bytes);
  auto top = u.run();
  if (!top.is_ok()) return top.status();
  if ((*top)->kind != Obj::Kind::kDict) {
    return Status::invalid_argument(path +
                                    ": holds something other than a state dict; allowed: a dict of "
                                    "tensor names to tensors (save_pretrained's pytorch_model.bin)");
  }
  header = nlohmann::json::object();
  for (const auto& [key, value] : (*top)->dict) {
    if (key->kind != Obj::Kind::kStr || value->kind != Obj::Kind::kTensor) {
      return Status::invalid_argument(path +
                                      ": an entry of its dict is not a tensor by name; allowed: a state "
                                      "dict of tensors");
    }
    const Obj& st = *value->storage;
    const auto entry = zip.find(prefix + "data/" + st.s);
    if (entry == zip.end()) {
      return Status::invalid_argument(path + ": tensor '" + key->s + "' has its storage in entry data/" +
                                      st.s + ", which the zip does not have (truncated?)");
    }
    std::uint64_t numel = 1;
    for (long long d : value->shape) numel *= static_cast<std::uint64_t>(d);
    const auto eb = static_cast<std::uint64_t>(st.element_bytes);
    if (st.numel * eb > entry->second.size || value->offset + numel > st.numel) {
      return Status::invalid_argument(path + ": tensor '" + key->s + "' does not fit its storage (" +
                                      std::to_string(entry->second.size) + " bytes)");
    }
    const std::uint64_t begin = entry->second.data + value->offset * eb;
    header[key->s] = {
        {"dtype", st.dtype}, {"shape", value->shape}, {"data_offsets", {begin, begin + numel * eb}}};
  }
  return Status::ok();
}

}  // namespace memwall::model
