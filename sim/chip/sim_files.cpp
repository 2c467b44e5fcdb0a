#include "sim/chip/sim_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/config/toml_errors.h"

namespace kiln::sim {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kStateFormatVersion = 1;
constexpr const char* kStateFileName = "state.toml";
constexpr const char* kLockFileName = "lock";

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

std::string errno_text() { return std::strerror(errno); }

template <class Int>
Result<Int> parse_integer(const std::string& key, const std::string& value) {
  Int out{};
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size()) {
    return fail(Errc::config, "sim option " + key + "='" + value +
                                  "' is not a valid non-negative integer; fix the value");
  }
  return out;
}

Result<double> parse_double(const std::string& key, const std::string& value) {
  // std::from_chars for double is available in g++ 12's libstdc++.
  double out = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(out)) {
    return fail(Errc::config,
                "sim option " + key + "='" + value + "' is not a number; fix the value");
  }
  return out;
}

fs::path resolve(const fs::path& base_dir, const std::string& value) {
  fs::path p(value);
  if (p.is_relative()) p = base_dir / p;
  return p.lexically_normal();
}

// One validation path for every option, whether it came from a TOML file or inline text.
Status apply_option(SimOptions& options, const std::string& key, const std::string& value,
                    const fs::path& base_dir) {
  if (key == "node_id") {
    if (value.empty() || value.size() > 40) {
      return fail(Errc::config, "sim option node_id must be 1 to 40 characters; got '" + value +
                                    "'");
    }
    options.identity.node_id = value;
  } else if (key == "hardware_revision") {
    auto revision = parse_revision(value);
    if (!revision) return tl::unexpected(revision.error());
    options.identity.revision = *revision;
  } else if (key == "chip_count") {
    auto count = parse_integer<std::uint32_t>(key, value);
    if (!count) return tl::unexpected(count.error());
    if (*count == 0 || *count > kMaxChipCount) {
      return fail(Errc::config, "sim option chip_count=" + value + " is out of range; use 1 to " +
                                    std::to_string(kMaxChipCount));
    }
    options.identity.chip_count = *count;
  } else if (key == "seed") {
    auto seed = parse_integer<std::uint64_t>(key, value);
    if (!seed) return tl::unexpected(seed.error());
    options.identity.seed = *seed;
  } else if (key == "state_dir") {
    if (value.empty()) return fail(Errc::config, "sim option state_dir is empty; give a folder");
    options.state_dir = resolve(base_dir, value);
  } else if (key == "fault_file") {
    if (value.empty()) {
      options.fault_file.reset();
    } else {
      options.fault_file = resolve(base_dir, value);
    }
  } else if (key == "firmware_version") {
    if (value.empty() || value.size() >= 64) {
      return fail(Errc::config, "sim option firmware_version must be 1 to 63 characters");
    }
    options.firmware_version = value;
  } else if (key == "thermal_time_constant_ms") {
    auto tau = parse_integer<std::int64_t>(key, value);
    if (!tau) return tl::unexpected(tau.error());
    if (*tau < 1) return fail(Errc::config, "sim option thermal_time_constant_ms must be >= 1");
    options.thermal_time_constant_ms = *tau;
  } else if (key == "self_test_time_scale") {
    auto scale = parse_double(key, value);
    if (!scale) return tl::unexpected(scale.error());
    if (*scale < 0.0 || *scale > 1.0) {
      return fail(Errc::config, "sim option self_test_time_scale must be in [0, 1]");
    }
    options.self_test_time_scale = *scale;
  } else {
    static const std::vector<std::string_view> options_known = {
        "node_id",          "hardware_revision",        "chip_count",          "seed",  "state_dir", "fault_file",
        "firmware_version", "thermal_time_constant_ms", "self_test_time_scale", "config"};
    return fail(Errc::config, "unknown sim option '" + key + "'" + config::suggestion(key, options_known));
  }
  return {};
}

Result<std::string> toml_scalar_text(const std::string& key, const toml::node& node) {
  if (auto s = node.value_exact<std::string>()) return *s;
  if (auto i = node.value_exact<std::int64_t>()) {
    if (*i < 0) {
      return fail(Errc::config, "sim option " + key + " must not be negative");
    }
    return std::to_string(*i);
  }
  if (auto d = node.value_exact<double>()) {
    std::ostringstream out;
    out.precision(17);
    out << *d;
    return out.str();
  }
  return fail(Errc::config,
              "sim option " + key + " must be a string or a number in the sim node TOML");
}

Status apply_toml_text(SimOptions& options, std::string_view text, const fs::path& path) {
  auto table = config::parse_toml(text, path.string(), "fix the file");
  if (!table) return fail(Errc::config, table.error().message);
  const fs::path base_dir = fs::absolute(path).parent_path();
  for (const auto& [key, node] : *table) {
    const std::string name(key.str());
    auto text = toml_scalar_text(name, node);
    Status applied = text ? apply_option(options, name, *text, base_dir) : Status(tl::unexpected(text.error()));
    if (!applied) {
      return fail(applied.error().code, config::where(path.string(), key.source()) + ": " + applied.error().message);
    }
  }
  return {};
}

Status apply_toml_file(SimOptions& options, const fs::path& path) {
  auto text = config::read_text_file(path.string(), "sim node TOML", "check the config= path");
  if (!text) return fail(Errc::config, text.error().message);
  return apply_toml_text(options, *text, path);
}

Result<SimOptions> finish_options(SimOptions options) {
  if (options.state_dir.empty()) {
    return fail(Errc::config, "sim driver options lack state_dir; give the folder that keeps "
                              "the simulated chips' state (firmware slots, bindings, faults)");
  }
  options.state_dir = fs::absolute(options.state_dir);
  return options;
}

std::string digest_of(std::string_view bytes) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001B3ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

Result<std::string> read_whole_file(const fs::path& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::io, "cannot open " + std::string(what) + " '" + path.string() +
                              "': " + errno_text() + "; check the path and its permissions");
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Accessors that turn a missing or wrongly typed state field into a clear error.
class StateReader {
 public:
  explicit StateReader(const fs::path& file) : file_(file) {}

  template <class T>
  T get(const toml::table& table, std::string_view key) {
    auto value = table[key].value_exact<T>();
    if (!value) {
      if (error_.empty()) error_ = std::string(key);
      return T{};
    }
    return *value;
  }

  Status status() const {
    if (error_.empty()) return {};
    return fail(Errc::io, "sim state file '" + file_.string() + "' lacks a valid '" + error_ +
                              "'; it is damaged: remove the state directory to start a fresh "
                              "simulated node");
  }

  void invalid(std::string what) {
    if (error_.empty()) error_ = std::move(what);
  }

 private:
  fs::path file_;
  std::string error_;
};

Slot slot_from_text(StateReader& reader, const std::string& text) {
  if (text == "a") return Slot::a;
  if (text != "b") reader.invalid("slot name '" + text + "'");
  return Slot::b;
}

toml::table slot_table(const FirmwareSlotState& slot) {
  toml::table t;
  t.insert_or_assign("version", slot.version);
  t.insert_or_assign("valid", slot.valid);
  t.insert_or_assign("faulty", slot.faulty);
  return t;
}

}  // namespace

Result<SimOptions> parse_sim_options(std::string_view text) {
  const std::string options = trim(text);
  SimOptions out;
  if (options.empty()) {
    return fail(Errc::config, "sim driver options are empty; give state_dir=DIR (inline "
                              "key=value;...) or the path to a sim node TOML");
  }
  if (options.find('=') == std::string::npos) {
    if (auto ok = apply_toml_file(out, fs::path(options)); !ok) return tl::unexpected(ok.error());
  } else {
    std::map<std::string, std::string> inline_options;
    std::string_view rest = options;
    while (!rest.empty()) {
      const auto end = rest.find(';');
      const std::string item = trim(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
      if (item.empty()) continue;
      const auto eq = item.find('=');
      if (eq == std::string::npos) {
        return fail(Errc::config, "sim option '" + item + "' has no '='; write key=value");
      }
      const std::string key = trim(item.substr(0, eq));
      if (!inline_options.emplace(key, trim(item.substr(eq + 1))).second) {
        return fail(Errc::config, "sim option '" + key + "' is given twice; keep one");
      }
    }
    // A named TOML gives the base; the other inline keys override it.
    if (auto config = inline_options.find("config"); config != inline_options.end()) {
      if (auto ok = apply_toml_file(out, fs::path(config->second)); !ok) {
        return tl::unexpected(ok.error());
      }
      inline_options.erase(config);
    }
    const fs::path cwd = fs::current_path();
    for (const auto& [key, value] : inline_options) {
      if (auto ok = apply_option(out, key, value, cwd); !ok) return tl::unexpected(ok.error());
    }
  }
  return finish_options(std::move(out));
}

Result<SimOptions> parse_sim_options_toml(std::string_view text, const fs::path& path) {
  SimOptions out;
  if (auto ok = apply_toml_text(out, text, path); !ok) return tl::unexpected(ok.error());
  return finish_options(std::move(out));
}

Result<FaultFile> read_fault_file(const fs::path& path, TimeMs now) {
  auto bytes = read_whole_file(path, "sim fault file");
  if (!bytes) return tl::unexpected(bytes.error());
  return parse_fault_file(*bytes, path, now);
}

Result<FaultFile> parse_fault_file(std::string_view bytes, const fs::path& path, TimeMs now) {
  auto parsed = config::parse_toml(bytes, path.string(), "fix the sim fault file");
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& table = *parsed;
  FaultFile out;
  out.digest = digest_of(bytes);
  if (auto ok = config::check_known_keys(path.string(), table, "a sim fault file (use [[fault]] tables only)",
                                         {"fault"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const toml::array* faults = table["fault"].as_array();
  if (faults == nullptr) {
    if (table.contains("fault")) {
      return fail(Errc::config, "sim fault file '" + path.string() +
                                    "': 'fault' must be an array of tables ([[fault]])");
    }
    return out;
  }
  std::size_t position = 0;
  for (const auto& element : *faults) {
    ++position;
    const std::string where =
        "fault #" + std::to_string(position) + " in sim fault file '" + path.string() + "'";
    const toml::table* entry = element.as_table();
    if (entry == nullptr) return fail(Errc::config, where + " is not a table");
    if (auto ok = config::check_known_keys(path.string(), *entry, "[[fault]]", {"chip", "kind", "factor", "mode"});
        !ok) {
      return tl::unexpected(ok.error());
    }
    auto chip = (*entry)["chip"].value_exact<std::int64_t>();
    auto kind_text = (*entry)["kind"].value_exact<std::string>();
    if (!chip || *chip < 0 || !kind_text) {
      return fail(Errc::config, where + " needs chip = <index> and kind = \"<fault kind>\"");
    }
    auto kind = parse_fault_kind(*kind_text);
    if (!kind) return fail(Errc::config, where + ": " + kind.error().message);
    double factor = 0.0;
    if (auto f = (*entry)["factor"].value<double>()) factor = *f;
    auto mode = parse_flash_fail_mode((*entry)["mode"].value_or(std::string{}));
    if (!mode) return fail(Errc::config, where + ": " + mode.error().message);
    auto fault = make_fault(*kind, factor, *mode, now, true);
    if (!fault) return fail(Errc::config, where + ": " + fault.error().message);
    out.faults.push_back(FileFault{static_cast<std::uint32_t>(*chip), *fault});
  }
  return out;
}

Result<NodeState> read_node_state(const fs::path& state_dir) {
  const fs::path file = state_dir / kStateFileName;
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    return fail(Errc::not_found, "'" + state_dir.string() +
                                     "' holds no simulated node yet; open the sim driver once "
                                     "with state_dir=" + state_dir.string() + " to create it");
  }
  auto bytes = read_whole_file(file, "sim state file");
  if (!bytes) return tl::unexpected(bytes.error());
  return parse_node_state(*bytes, file);
}

Result<NodeState> parse_node_state(std::string_view bytes, const fs::path& file) {
  auto parsed = config::parse_toml(bytes, file.string(),
                                   "remove the state directory to start a fresh simulated node");
  if (!parsed) return fail(Errc::io, "sim state file is damaged: " + parsed.error().message);
  const toml::table& table = *parsed;
  StateReader reader(file);
  if (reader.get<std::int64_t>(table, "format") != kStateFormatVersion) {
    reader.invalid("format (expected " + std::to_string(kStateFormatVersion) + ")");
  }
  NodeState node;
  node.identity.node_id = reader.get<std::string>(table, "node_id");
  auto revision = parse_revision(reader.get<std::string>(table, "hardware_revision"));
  if (!revision) reader.invalid("hardware_revision");
  node.identity.revision = revision.value_or(Revision::a);
  node.identity.chip_count =
      static_cast<std::uint32_t>(reader.get<std::int64_t>(table, "chip_count"));
  const std::string seed_text = reader.get<std::string>(table, "seed");
  auto seed = parse_integer<std::uint64_t>("seed", seed_text);
  if (!seed) reader.invalid("seed");
  node.identity.seed = seed.value_or(0);
  node.fault_file_digest = reader.get<std::string>(table, "fault_file_digest");
  // Absent in the state of a node no driver was ever installed on.
  if (const auto version = table["driver_version"].value<std::string>()) node.driver_version = *version;

  const toml::array* chips = table["chip"].as_array();
  if (chips == nullptr || chips->size() != node.identity.chip_count) {
    reader.invalid("chip (one [[chip]] per chip)");
    return tl::unexpected(reader.status().error());
  }
  for (const auto& element : *chips) {
    const toml::table* c = element.as_table();
    if (c == nullptr) {
      reader.invalid("chip table");
      break;
    }
    ChipState chip;
    chip.index = static_cast<std::uint32_t>(node.chips.size());
    chip.active = slot_from_text(reader, reader.get<std::string>(*c, "active_slot"));
    const std::string previous = reader.get<std::string>(*c, "previous_slot");
    if (!previous.empty()) chip.previous = slot_from_text(reader, previous);
    for (Slot s : {Slot::a, Slot::b}) {
      const toml::table* slot = (*c)[s == Slot::a ? "slot_a" : "slot_b"].as_table();
      if (slot == nullptr) {
        reader.invalid("slot table");
        continue;
      }
      chip.slot(s) = FirmwareSlotState{reader.get<std::string>(*slot, "version"),
                                       reader.get<bool>(*slot, "valid"),
                                       reader.get<bool>(*slot, "faulty")};
    }
    chip.bound_pid = reader.get<std::int64_t>(*c, "bound_pid");
    chip.load.loaded = reader.get<bool>(*c, "loaded");
    chip.load.changed_at_ms = reader.get<std::int64_t>(*c, "load_changed_at_ms");
    chip.load.fraction_at_change = reader.get<double>(*c, "load_fraction_at_change");
    chip.ecc_corrected_base =
        static_cast<std::uint64_t>(reader.get<std::int64_t>(*c, "ecc_corrected_base"));
    chip.ecc_reset_at_ms = reader.get<std::int64_t>(*c, "ecc_reset_at_ms");
    chip.self_test_runs = static_cast<std::uint64_t>(reader.get<std::int64_t>(*c, "self_test_runs"));
    if (const toml::array* faults = (*c)["fault"].as_array()) {
      for (const auto& f : *faults) {
        const toml::table* ft = f.as_table();
        if (ft == nullptr) {
          reader.invalid("fault table");
          continue;
        }
        auto kind = parse_fault_kind(reader.get<std::string>(*ft, "kind"));
        auto mode = parse_flash_fail_mode(reader.get<std::string>(*ft, "mode"));
        if (!kind || !mode) {
          reader.invalid("fault kind or mode");
          continue;
        }
        chip.faults.push_back(Fault{*kind, reader.get<double>(*ft, "factor"), *mode,
                                    reader.get<std::int64_t>(*ft, "since_ms"),
                                    reader.get<bool>(*ft, "from_fault_file")});
      }
    }
    node.chips.push_back(std::move(chip));
  }
  if (auto ok = reader.status(); !ok) return tl::unexpected(ok.error());
  return node;
}

Status write_node_state(const fs::path& state_dir, const NodeState& node) {
  toml::table table;
  table.insert_or_assign("format", kStateFormatVersion);
  table.insert_or_assign("node_id", node.identity.node_id);
  table.insert_or_assign("hardware_revision", std::string(to_string(node.identity.revision)));
  table.insert_or_assign("chip_count", static_cast<std::int64_t>(node.identity.chip_count));
  // A string keeps all 64 bits of the seed; TOML integers are signed.
  table.insert_or_assign("seed", std::to_string(node.identity.seed));
  table.insert_or_assign("fault_file_digest", node.fault_file_digest);
  table.insert_or_assign("driver_version", node.driver_version);
  toml::array chips;
  for (const ChipState& chip : node.chips) {
    toml::table c;
    c.insert_or_assign("index", static_cast<std::int64_t>(chip.index));
    c.insert_or_assign("active_slot", std::string(to_string(chip.active)));
    c.insert_or_assign("previous_slot",
                       chip.previous ? std::string(to_string(*chip.previous)) : std::string{});
    c.insert_or_assign("slot_a", slot_table(chip.slot(Slot::a)));
    c.insert_or_assign("slot_b", slot_table(chip.slot(Slot::b)));
    c.insert_or_assign("bound_pid", chip.bound_pid);
    c.insert_or_assign("loaded", chip.load.loaded);
    c.insert_or_assign("load_changed_at_ms", chip.load.changed_at_ms);
    c.insert_or_assign("load_fraction_at_change", chip.load.fraction_at_change);
    c.insert_or_assign("ecc_corrected_base", static_cast<std::int64_t>(chip.ecc_corrected_base));
    c.insert_or_assign("ecc_reset_at_ms", chip.ecc_reset_at_ms);
    c.insert_or_assign("self_test_runs", static_cast<std::int64_t>(chip.self_test_runs));
    toml::array faults;
    for (const Fault& f : chip.faults) {
      toml::table ft;
      ft.insert_or_assign("kind", std::string(to_string(f.kind)));
      ft.insert_or_assign("factor", f.factor);
      ft.insert_or_assign("mode", std::string(to_string(f.flash_mode)));
      ft.insert_or_assign("since_ms", f.since_ms);
      ft.insert_or_assign("from_fault_file", f.from_fault_file);
      faults.push_back(std::move(ft));
    }
    c.insert_or_assign("fault", std::move(faults));
    chips.push_back(std::move(c));
  }
  table.insert_or_assign("chip", std::move(chips));

  std::ostringstream text;
  text << "# State of a simulated kiln node; written by the sim driver, do not edit.\n"
       << table << "\n";
  const std::string bytes = text.str();

  // Write a temporary file and rename it over the state, so readers that take no lock see
  // either the old or the new state, never half of one.
  const fs::path target = state_dir / kStateFileName;
  const fs::path temporary =
      state_dir / (std::string(kStateFileName) + ".tmp." + std::to_string(::getpid()));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(Errc::io, "cannot write sim state in '" + state_dir.string() +
                              "': " + errno_text() + "; check the folder's permissions");
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(temporary.c_str());
      return fail(Errc::io, "cannot write sim state file '" + temporary.string() + "': " + why);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary.c_str());
    return fail(Errc::io, "cannot flush sim state file '" + temporary.string() + "': " + why);
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary.c_str());
    return fail(Errc::io, "cannot replace sim state file '" + target.string() + "': " + why);
  }
  return {};
}

Result<StateLock> StateLock::acquire(const fs::path& state_dir) {
  const fs::path file = state_dir / kLockFileName;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(Errc::io, "cannot open sim lock file '" + file.string() + "': " + errno_text() +
                              "; check that the state directory exists and is writable");
  }
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const std::string why = errno_text();
    ::close(fd);
    return fail(Errc::io, "cannot lock sim state '" + file.string() + "': " + why);
  }
  return StateLock(fd);
}

StateLock::StateLock(StateLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

StateLock::~StateLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace kiln::sim
