// Streaming Chrome-trace writer, reader into typed structs, and a gzip ostream.
#include "trace/trace.h"

#include <cstdlib>
#include <cstring>

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "base/utf8.h"
#include "trace/trace_version.h"

namespace memwall::trace {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

namespace {

// A trace's number as an int id (pid, tid, task, group, dependency): out-of-range values become -1, which no
// task or track has, instead of an undefined cast.
int id_of(double v) {
  const long w = whole_or(v, -1);
  return w >= -1 && w <= 2147483647L ? static_cast<int>(w) : -1;
}

// Numbers: integers exactly, others with enough digits; JSON has no inf/nan.
std::string num(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}
const std::string& or_null(const std::string& json) {
  static const std::string kNull = "null";
  return json.empty() ? kNull : json;
}
}  // namespace

TraceWriter::TraceWriter(std::ostream& out) : out_(out) {}

void TraceWriter::begin(const TraceHeader& h) {
  out_ << "{\"otherData\":{\"format\":" << json_quote(kFormatName)
       << ",\"version\":" << json_quote(format_version())
       << ",\"memwall_version\":" << json_quote(h.memwall_version)
       << ",\"executor\":" << json_quote(h.executor) << ",\"command\":" << json_quote(h.command)
       << ",\"ranks\":" << h.ranks << ",\"hardware\":" << or_null(h.hardware_json)
       << ",\"model\":" << or_null(h.model_json) << ",\"run\":" << or_null(h.run_json)
       << ",\"summary\":" << or_null(h.summary_json) << "},\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  begun_ = true;
}

void TraceWriter::separator() {
  if (events_++ > 0) out_ << ",\n";
}

void TraceWriter::process_name(int pid, const std::string& name) {
  separator();
  out_ << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid
       << ",\"args\":{\"name\":" << json_quote(name) << "}}";
}

void TraceWriter::thread_name(int pid, int tid, const std::string& name) {
  separator();
  out_ << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << pid << ",\"tid\":" << tid
       << ",\"args\":{\"name\":" << json_quote(name) << "}}";
}

void TraceWriter::span(const TraceSpan& s) {
  separator();
  out_ << "{\"ph\":\"X\",\"name\":" << json_quote(s.name) << ",\"cat\":" << json_quote(s.category)
       << ",\"pid\":" << s.pid << ",\"tid\":" << s.tid << ",\"ts\":" << num(s.ts_us)
       << ",\"dur\":" << num(s.dur_us) << ",\"args\":{\"task\":" << s.task
       << ",\"phase\":" << json_quote(s.phase);
  if (s.bytes > 0) {
    out_ << ",\"bytes\":" << num(s.bytes);
    if (s.dur_us > 0) out_ << ",\"GBps\":" << num(s.bytes / s.dur_us / 1e3);
  }
  if (s.flops > 0) {
    out_ << ",\"flops\":" << num(s.flops);
    if (s.dur_us > 0) out_ << ",\"TFLOPs\":" << num(s.flops / s.dur_us / 1e6);
  }
  if (!s.collective.empty())
    out_ << ",\"collective\":" << json_quote(s.collective) << ",\"group\":" << s.group;
  if (!s.deps.empty()) {
    out_ << ",\"deps\":[";
    for (std::size_t i = 0; i < s.deps.size(); ++i) out_ << (i ? "," : "") << s.deps[i];
    out_ << "]";
  }
  out_ << "}}";
}

void TraceWriter::counter(const CounterSample& c) {
  separator();
  out_ << "{\"ph\":\"C\",\"name\":" << json_quote(c.name) << ",\"pid\":" << c.pid
       << ",\"ts\":" << num(c.ts_us) << ",\"args\":{";
  for (size_t i = 0; i < c.values.size(); ++i) {
    out_ << (i ? "," : "") << json_quote(c.values[i].first) << ":" << num(c.values[i].second);
  }
  out_ << "}}";
}

Status TraceWriter::finish() {
  if (!begun_) return Status::failed_precondition("trace writer: finish() before begin()");
  out_ << "\n]}\n";
  out_.flush();
  if (!out_) return Status::io_error("trace writer: the output stream failed (disk full?)");
  return Status::ok();
}

// ---- gzip ----

class GzipOstream::Buf : public std::streambuf {
 public:
  Buf(std::ostream& sink, int level) : sink_(sink) {
    z_ = {};
    ok_ = deflateInit2(&z_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK;  // +16: gzip header
    setp(in_, in_ + sizeof in_);
  }
  ~Buf() override { (void)finish(); }
  Status finish() {
    if (finished_) return status_;
    finished_ = true;
    if (ok_) {
      deflate_out(Z_FINISH);
      deflateEnd(&z_);
    }
    sink_.flush();
    if (!ok_ || !sink_) status_ = Status::io_error("gzip stream: compression or write failed");
    return status_;
  }

 protected:
  int_type overflow(int_type ch) override {
    if (!deflate_out(Z_NO_FLUSH)) return traits_type::eof();
    if (ch != traits_type::eof()) {
      *pptr() = static_cast<char>(ch);
      pbump(1);
    }
    return ch == traits_type::eof() ? 0 : ch;
  }
  int sync() override { return deflate_out(Z_SYNC_FLUSH) ? 0 : -1; }

 private:
  bool deflate_out(int flush) {
    if (!ok_) return false;
    z_.next_in = reinterpret_cast<Bytef*>(pbase());
    z_.avail_in = static_cast<uInt>(pptr() - pbase());
    do {
      z_.next_out = reinterpret_cast<Bytef*>(out_);
      z_.avail_out = sizeof out_;
      const int rc = deflate(&z_, flush);
      if (rc == Z_STREAM_ERROR) return ok_ = false;
      sink_.write(out_, static_cast<std::streamsize>(sizeof out_ - z_.avail_out));
    } while (z_.avail_out == 0);
    setp(in_, in_ + sizeof in_);
    return static_cast<bool>(sink_);
  }
  std::ostream& sink_;
  z_stream z_;
  bool ok_ = false;
  bool finished_ = false;
  Status status_;
  char in_[1 << 16];
  char out_[1 << 16];
};

GzipOstream::GzipOstream(std::ostream& sink, int level)
    : std::ostream(nullptr), buf_(std::make_unique<Buf>(sink, level)) {
  rdbuf(buf_.get());
}
GzipOstream::~GzipOstream() {
  (void)close();
}
Status GzipOstream::close() {
  flush();
  return buf_->finish();
}

// ---- reader ----

namespace {

Result<std::string> gunzip(std::string_view in) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return Status::internal("zlib: inflateInit failed");
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      if (rc == Z_BUF_ERROR) return Status::invalid_argument("gzip data is truncated");
      return Status::invalid_argument(std::string("gzip data is corrupt (") +
                                      (z.msg ? z.msg : "inflate error") + ")");
    }
    out.append(buf, sizeof buf - z.avail_out);
  }
  inflateEnd(&z);
  return out;
}

}  // namespace

namespace {

// A streaming JSON scanner for traces: parses straight into TraceData without building a document (a
// million events load in about a second), and names the byte where the JSON stops being valid.
class Scanner {
 public:
  explicit Scanner(std::string_view text)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()) {}

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool peek(char c) {
    ws();
    return p_ < end_ && *p_ == c;
  }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++p_;
    return true;
  }
  Status expect(char c) {
    if (eat(c)) return Status::ok();
    return error(std::string("expected '") + c + "'");
  }
  Status error(const std::string& what) const {
    const std::size_t at = static_cast<std::size_t>(p_ - begin_);
    if (p_ >= end_)
      return Status::invalid_argument("not valid JSON (truncated?): the text ends at byte " +
                                      std::to_string(at) + " where " + what.substr(9) + " was expected");
    return Status::invalid_argument("not valid JSON (truncated?): at byte " + std::to_string(at) + ": " +
                                    what);
  }
  bool at_end() {
    ws();
    return p_ >= end_;
  }
  const char* pos() const { return p_; }

  Status string(std::string& out) {
    out.clear();
    if (!eat('"')) return error("expected a string");
    for (;;) {
      const char* q = p_;
      while (q < end_ && *q != '"' && *q != '\\') ++q;
      out.append(p_, q);
      p_ = q;
      if (p_ >= end_) return error("expected the end of a string");
      if (*p_ == '"') {
        ++p_;
        return Status::ok();
      }
      ++p_;  // backslash
      if (p_ >= end_) return error("expected an escape");
      const char e = *p_++;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (end_ - p_ < 4) return error("expected 4 hex digits");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = *p_++;
            cp = cp * 16 + static_cast<unsigned>(h >= '0' && h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          append_utf8(cp, out);
          break;
        }
        default:
          return error("expected a valid escape");
      }
    }
  }

  bool is_number_start() {
    ws();
    return p_ < end_ && (*p_ == '-' || (*p_ >= '0' && *p_ <= '9'));
  }
  Status number(double& out) {
    ws();
    char* stop = nullptr;
    // The text is not NUL-terminated: copy a number's worth of characters (at most 64) first.
    char buf[65];
    std::size_t n = 0;
    auto numeric = [](char c) {
      return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
    };
    while (p_ + n < end_ && n < 64 && numeric(p_[n])) ++n;
    if (n == 0) return error("expected a number");
    std::memcpy(buf, p_, n);
    buf[n] = '\0';
    out = std::strtod(buf, &stop);
    if (stop == buf) return error("expected a number");
    p_ += stop - buf;
    return Status::ok();
  }
  Status literal() {
    ws();
    for (const char* w : {"true", "false", "null"}) {
      const std::size_t n = std::strlen(w);
      if (static_cast<std::size_t>(end_ - p_) >= n && std::memcmp(p_, w, n) == 0) {
        p_ += n;
        return Status::ok();
      }
    }
    return error("expected a value");
  }
  // `[item, ...]`: item() reads each element.
  template <typename F>
  Status array(F&& item) {
    MW_RETURN_IF_ERROR(expect('['));
    if (eat(']')) return Status::ok();
    for (;;) {
      MW_RETURN_IF_ERROR(item());
      if (eat(']')) return Status::ok();
      MW_RETURN_IF_ERROR(expect(','));
    }
  }
  // `{"key": value, ...}`: member(key) reads each value.
  template <typename F>
  Status object(F&& member) {
    MW_RETURN_IF_ERROR(expect('{'));
    if (eat('}')) return Status::ok();
    std::string key;
    for (;;) {
      MW_RETURN_IF_ERROR(string(key));
      MW_RETURN_IF_ERROR(expect(':'));
      MW_RETURN_IF_ERROR(member(key));
      if (eat('}')) return Status::ok();
      MW_RETURN_IF_ERROR(expect(','));
    }
  }

  Status skip_value(int depth = 0) {
    if (depth > 64) return error("expected less nesting");
    ws();
    if (p_ >= end_) return error("expected a value");
    if (*p_ == '"') {
      std::string tmp;
      return string(tmp);
    }
    if (*p_ == '{') return object([&](const std::string&) { return skip_value(depth + 1); });
    if (*p_ == '[') return array([&] { return skip_value(depth + 1); });
    if (is_number_start()) {
      double d;
      return number(d);
    }
    return literal();
  }

 private:
  const char* begin_;
  const char* p_;
  const char* end_;
};

struct RawEvent {
  std::string ph, name, cat, phase, arg_name, collective;
  double pid = 0, tid = 0, ts = 0, dur = 0;
  double task = -1, bytes = 0, flops = 0, group = 0;
  std::vector<int> deps;
  std::vector<std::pair<std::string, double>> numbers;  // every numeric arg (counters)
};

Status read_event(Scanner& sc, RawEvent& e) {
  e.ph.clear();
  e.name.clear();
  e.cat.clear();
  e.phase.clear();
  e.arg_name.clear();
  e.collective.clear();
  e.deps.clear();
  e.pid = e.tid = e.ts = e.dur = e.bytes = e.flops = e.group = 0;
  e.task = -1;
  e.numbers.clear();
  std::string sval;
  auto arg = [&](const std::string& akey) -> Status {
    if (sc.is_number_start()) {
      double v = 0;
      MW_RETURN_IF_ERROR(sc.number(v));
      if (akey == "task")
        e.task = v;
      else if (akey == "bytes")
        e.bytes = v;
      else if (akey == "flops")
        e.flops = v;
      else if (akey == "group")
        e.group = v;
      e.numbers.emplace_back(akey, v);
      return Status::ok();
    }
    if (sc.peek('"')) {
      MW_RETURN_IF_ERROR(sc.string(sval));
      if (akey == "phase")
        e.phase = sval;
      else if (akey == "name")
        e.arg_name = sval;
      else if (akey == "collective")
        e.collective = sval;
      return Status::ok();
    }
    if (akey == "deps" && sc.peek('[')) {
      return sc.array([&] {
        double v = 0;
        MW_RETURN_IF_ERROR(sc.number(v));
        e.deps.push_back(id_of(v));
        return Status::ok();
      });
    }
    return sc.skip_value();
  };
  return sc.object([&](const std::string& key) -> Status {
    if ((key == "ph" || key == "name" || key == "cat") && sc.peek('"'))
      return sc.string(key == "ph" ? e.ph : (key == "name" ? e.name : e.cat));
    if ((key == "pid" || key == "tid" || key == "ts" || key == "dur") && sc.is_number_start())
      return sc.number(key == "pid" ? e.pid : key == "tid" ? e.tid : key == "ts" ? e.ts : e.dur);
    if (key == "args" && sc.peek('{')) return sc.object(arg);
    return sc.skip_value();
  });
}

void add_event(TraceData& d, RawEvent& e) {
  if (e.ph == "X") {
    TraceSpan s;
    s.pid = id_of(e.pid);
    s.tid = id_of(e.tid);
    s.name = std::move(e.name);
    s.category = std::move(e.cat);
    s.ts_us = e.ts;
    s.dur_us = e.dur;
    s.task = id_of(e.task);
    s.phase = std::move(e.phase);
    s.bytes = e.bytes;
    s.flops = e.flops;
    s.deps = std::move(e.deps);
    s.collective = std::move(e.collective);
    s.group = id_of(e.group);
    d.spans.push_back(std::move(s));
  } else if (e.ph == "C") {
    CounterSample c;
    c.pid = id_of(e.pid);
    c.name = std::move(e.name);
    c.ts_us = e.ts;
    c.values = std::move(e.numbers);
    d.counters.push_back(std::move(c));
  } else if (e.ph == "M" && e.name == "thread_name") {
    d.threads[{id_of(e.pid), id_of(e.tid)}] = e.arg_name;
  } else if (e.ph == "M" && e.name == "process_name") {
    d.processes[id_of(e.pid)] = e.arg_name;
  } else {
    ++d.unknown_events;
  }
}

}  // namespace

Result<std::string> inflate_if_gzip(std::string_view bytes) {
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    return gunzip(bytes);
  }
  return std::string(bytes);
}

Result<TraceData> read_trace(std::string_view bytes) {
  std::string inflated;
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    Result<std::string> r = gunzip(bytes);
    if (!r.is_ok()) return r.status();
    inflated = std::move(*r);
    bytes = inflated;
  }
  Scanner sc(bytes);
  TraceData d;
  std::string_view header;
  bool have_events = false;
  RawEvent e;
  const Status parsed = sc.object([&](const std::string& key) -> Status {
    if (key == "otherData") {
      sc.ws();
      const char* from = sc.pos();
      MW_RETURN_IF_ERROR(sc.skip_value());
      header = std::string_view(from, static_cast<std::size_t>(sc.pos() - from));
      return Status::ok();
    }
    if (key == "traceEvents" && sc.peek('[')) {
      have_events = true;
      return sc.array([&] {
        MW_RETURN_IF_ERROR(read_event(sc, e));
        add_event(d, e);
        return Status::ok();
      });
    }
    return sc.skip_value();
  });
  if (!parsed.is_ok()) return parsed;
  if (!sc.at_end()) return sc.error("expected the end of the text");
  nlohmann::json od = header.empty() ? nlohmann::json() : nlohmann::json::parse(header, nullptr, false);
  if (!od.is_object()) {
    return Status::invalid_argument(
        "not a memwall trace: no \"otherData\" header (a plain Chrome or PyTorch trace?)");
  }
  // The header's fields of the types memwall writes (the JSON library's own errors name no key).
  for (const char* key : {"format", "version", "memwall_version", "executor", "command"}) {
    if (od.contains(key) && !od[key].is_string()) {
      return Status::invalid_argument(std::string("otherData.") + key + " is " + od[key].dump() +
                                      "; allowed: a string");
    }
  }
  if (od.contains("ranks") && !(od["ranks"].is_number_integer() && od["ranks"].get<long>() >= 1 &&
                                od["ranks"].get<long>() <= 1 << 20)) {
    return Status::invalid_argument("otherData.ranks is " + od["ranks"].dump() +
                                    "; allowed: an integer 1..1048576");
  }
  d.format = od.value("format", "");
  d.version = od.value("version", "");
  MW_RETURN_IF_ERROR(check_version(d.format, d.version));
  auto text = [](const nlohmann::json& v) { return v.is_null() ? std::string() : v.dump(); };
  d.header.memwall_version = od.value("memwall_version", "");
  d.header.executor = od.value("executor", "");
  d.header.command = od.value("command", "");
  d.header.ranks = od.value("ranks", 1);
  d.header.hardware_json = text(od.value("hardware", nlohmann::json()));
  d.header.model_json = text(od.value("model", nlohmann::json()));
  d.header.run_json = text(od.value("run", nlohmann::json()));
  d.header.summary_json = text(od.value("summary", nlohmann::json()));
  if (!have_events) return Status::invalid_argument("memwall trace has no \"traceEvents\" list");
  return d;
}

}  // namespace memwall::trace
