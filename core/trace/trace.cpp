// Streaming Chrome-trace writer, reader into typed structs, and a gzip ostream.
#include "trace/trace.h"

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

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

Result<TraceData> read_trace(std::string_view bytes) {
  std::string inflated;
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    Result<std::string> r = gunzip(bytes);
    if (!r.is_ok()) return r.status();
    inflated = std::move(*r);
    bytes = inflated;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    const auto pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    return Status::invalid_argument("not valid JSON (truncated?): " + what);
  }
  if (!j.is_object() || !j.contains("otherData") || !j["otherData"].is_object()) {
    return Status::invalid_argument(
        "not a memwall trace: no \"otherData\" header (a plain Chrome or PyTorch trace?)");
  }
  const auto& od = j["otherData"];
  TraceData d;
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
  if (!j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    return Status::invalid_argument("memwall trace has no \"traceEvents\" list");
  }
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "X") {
      TraceSpan s;
      s.pid = e.value("pid", 0);
      s.tid = e.value("tid", 0);
      s.name = e.value("name", "");
      s.category = e.value("cat", "");
      s.ts_us = e.value("ts", 0.0);
      s.dur_us = e.value("dur", 0.0);
      if (e.contains("args")) {
        const auto& a = e["args"];
        s.task = a.value("task", -1);
        s.phase = a.value("phase", "");
        s.bytes = a.value("bytes", 0.0);
        s.flops = a.value("flops", 0.0);
      }
      d.spans.push_back(std::move(s));
    } else if (ph == "C") {
      CounterSample c;
      c.pid = e.value("pid", 0);
      c.name = e.value("name", "");
      c.ts_us = e.value("ts", 0.0);
      if (e.contains("args")) {
        for (auto it = e["args"].begin(); it != e["args"].end(); ++it) {
          if (it->is_number()) c.values.emplace_back(it.key(), it->get<double>());
        }
      }
      d.counters.push_back(std::move(c));
    } else if (ph == "M") {
      const std::string name = e.value("name", "");
      const std::string value = e.contains("args") ? e["args"].value("name", "") : "";
      if (name == "thread_name")
        d.threads[{e.value("pid", 0), e.value("tid", 0)}] = value;
      else if (name == "process_name")
        d.processes[e.value("pid", 0)] = value;
      else
        ++d.unknown_events;
    } else {
      ++d.unknown_events;
    }
  }
  return d;
}

}  // namespace memwall::trace
