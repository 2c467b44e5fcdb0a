// The examples of docs/*.md and README.md are true: every fenced block says what it is, every
// TOML example passes the loader of the file it stands for, every command of a shell example
// names a program, subcommands and options that exist (asked of the real binary's --help), and
// the console examples marked to run print what the doc shows. The marker is an HTML comment on
// one of the lines just above the block: <!-- example: agent.toml -->, <!-- example: partial -->
// (a TOML fragment, parsed only), <!-- example: runs --> (a console example run as shown).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "agent/health/targets.h"
#include "agent/host/agent_config.h"
#include "common/keys.h"
#include "common/stability/criteria.h"
#include "client/client.h"
#include "records/risk_register.h"
#include "qualification/webhook_sink.h"
#include "qualifier/qualifier_config.h"
#include "qualifier/ticket_sinks.h"
#include "release/environments.h"
#include "release/shell/release_config.h"
#include "coordinator/server/coordinator_config.h"
#include "strategy/matrix.h"
#include "sim/chip/sim_files.h"
#include "sim/workloads/stack_effects.h"
#include "tests/integration/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace {

namespace fs = std::filesystem;
using kiln::testing::bin;
using kiln::testing::contains;
using kiln::testing::run;
using kiln::testing::TempDir;

struct Block {
  std::string where;  // file:line of the opening fence
  std::string info;   // the fence's language
  std::string marker;
  std::string text;
};

using kiln::testing::read_file;

std::vector<fs::path> doc_files() {
  std::vector<fs::path> files{fs::path(KILN_SOURCE_DIR) / "README.md"};
  for (const auto& entry : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "docs")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<Block> blocks() {
  std::vector<Block> out;
  for (const fs::path& file : doc_files()) {
    std::istringstream lines(read_file(file));
    std::string line;
    std::vector<std::string> before;  // the lines above the current one
    Block* open = nullptr;
    int number = 0;
    while (std::getline(lines, line)) {
      ++number;
      const std::string fence = line.substr(std::min(line.find_first_not_of(' '), line.size()));
      if (fence.rfind("```", 0) == 0) {
        if (open) {
          open = nullptr;
        } else {
          Block block{fs::path(file).filename().string() + ":" + std::to_string(number), fence.substr(3), "", ""};
          for (std::size_t back = 1; back <= 3 && back <= before.size(); ++back) {
            const std::string& above = before[before.size() - back];
            const std::size_t at = above.find("<!-- example: ");
            if (at == std::string::npos) continue;
            const std::size_t start = at + 14;
            block.marker = above.substr(start, above.find(" -->", start) - start);
            break;
          }
          out.push_back(block);
          open = &out.back();
        }
      } else if (open) {
        open->text += line + "\n";
      }
      before.push_back(line);
    }
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// ---- TOML examples ----

// An example's absolute paths stand for a host's files: they are made under `root`, key files as
// keypairs and the folders of the rest, so the loader finds what the example names.
std::string make_named_files(const std::string& example, const fs::path& root) {
  std::string text = example;
  for (std::size_t at = 0; (at = text.find("\"/", at)) != std::string::npos; at += root.string().size() + 2) {
    text.insert(at + 1, root.string());
  }
  const toml::table doc = toml::parse(text);
  std::function<void(const toml::table&)> walk = [&](const toml::table& table) {
    table.for_each([&](const toml::key& key, const auto& node) {
      if constexpr (toml::is_table<decltype(node)>) {
        walk(node);
      } else if constexpr (toml::is_array<decltype(node)>) {
        for (const toml::node& entry : node) {
          if (const toml::table* t = entry.as_table()) walk(*t);
        }
      } else if constexpr (toml::is_string<decltype(node)>) {
        fs::path path(node.get());
        if (path.is_relative()) path = root / path;
        if (key.str().ends_with("_file") && !fs::exists(path)) {
          fs::create_directories(path.parent_path());
          auto keys = kiln::generate_keypair();
          REQUIRE(keys.has_value());
          REQUIRE(kiln::write_keypair((path.parent_path() / path.stem()).string(), *keys).has_value());
        } else if (node.get().starts_with("/")) {
          fs::create_directories(path.parent_path());
        }
      }
    });
  };
  walk(doc);
  return text;
}

template <class T>
std::string problem(const kiln::Result<T>& loaded) {
  return loaded ? "" : loaded.error().message;
}

// What is wrong with the agent.toml example beyond its loader: it must name the driver and
// workloads kiln builds, and options the sim driver takes.
std::string agent_example_problem(const kiln::agent::AgentConfig& config) {
  const std::string library = fs::path(config.driver_library_path).filename().string();
  if (!fs::exists(fs::path(KILN_LIB_DIR) / library)) return "the driver library " + library + " is not built by kiln";
  if (library == "libkiln_sim_driver.so") {
    if (auto options = kiln::sim::parse_sim_options(config.driver_options); !options) {
      return "the sim refuses its options: " + options.error().message;
    }
  }
  for (const auto& [name, program] : config.workloads) {
    const std::string file = fs::path(program).filename().string();
    if (!fs::exists(fs::path(KILN_BIN_DIR) / file)) return "workload " + name + ": kiln builds no program " + file;
  }
  return "";
}

std::string toml_example_problem(const Block& block, const fs::path& root) {
  try {
    (void)toml::parse(block.text);
  } catch (const toml::parse_error& e) {
    return std::string("not valid TOML: ") + std::string(e.description());
  }
  if (block.marker == "partial") return "";
  const std::string text = make_named_files(block.text, root);
  const std::string path = (root / block.marker).string();
  if (block.marker == "agent.toml") {
    auto config = kiln::agent::agent_config_from_text(text, path);
    return config ? agent_example_problem(*config) : config.error().message;
  }
  if (block.marker == "coordinator.toml") return problem(kiln::coordinator::coordinator_config_from_text(text, path));
  if (block.marker == "client.toml") return problem(kiln::cli::client_config_from_text(text, path));
  if (block.marker == "sim-node.toml") return problem(kiln::sim::parse_sim_options_toml(text, path));
  if (block.marker == "faults.toml") return problem(kiln::sim::parse_fault_file(text, path, 0));
  if (block.marker == "health-targets.toml") return problem(kiln::agent::health::parse_health_targets(text, path));
  if (block.marker == "stack-effects.toml") return problem(kiln::sim::workloads::parse_stack_effects(text, path));
  if (block.marker == "stability.toml") return problem(kiln::stability::parse_criteria_toml(text, path));
  if (block.marker == "qualifier.toml") return problem(kiln::qualifier::qualifier_config_from_text(text, path));
  if (block.marker == "risks.toml") return problem(kiln::qualification::parse_risk_register(text, path));
  if (block.marker == "release.toml") return problem(kiln::release::release_config_from_text(text, path));
  if (block.marker == "bundle.toml") return problem(kiln::release::parse_bundle_file(text, path));
  if (block.marker == "environment.toml") return problem(kiln::release::parse_environment_file(text, path, "staging"));
  if (block.marker == "compatibility.toml") return problem(kiln::release::parse_compatibility(text, path));
  if (block.marker == "matrix.toml") return problem(kiln::strategy::parse_matrix(block.text, path));
  if (block.marker == "webhook.toml") {
    auto config = kiln::qualifier::webhook_config_from_text(text, path);
    return config ? problem(kiln::qualification::webhook_endpoint(*config)) : config.error().message;
  }
  return "no loader for the marker '" + block.marker + "'; mark a TOML example with <!-- example: FILE --> (agent.toml, "
         "coordinator.toml, client.toml, qualifier.toml, risks.toml, webhook.toml, sim-node.toml, faults.toml, "
         "health-targets.toml, stack-effects.toml, stability.toml, release.toml, bundle.toml, environment.toml, "
         "compatibility.toml, matrix.toml) or <!-- example: partial -->";
}

// ---- shell examples ----

// The command lines of a block: a console example's "$ " lines, every line of the others;
// a trailing backslash continues the line.
std::vector<std::string> command_lines(const Block& block) {
  std::vector<std::string> out;
  std::string pending;
  for (std::string line : lines_of(block.text)) {
    if (block.info == "console") {
      if (!pending.empty()) {
        line = pending + line;
      } else if (line.rfind("$ ", 0) == 0) {
        line = line.substr(2);
      } else {
        continue;
      }
    } else if (block.info == "ini") {
      const std::size_t equals = line.find('=');
      if (line.rfind("ExecStart", 0) != 0 || equals == std::string::npos) continue;
      line = line.substr(equals + 1);
    } else if (!pending.empty()) {
      line = pending + line;
    }
    pending.clear();
    if (!line.empty() && line.back() == '\\') {
      pending = line.substr(0, line.size() - 1);
      continue;
    }
    out.push_back(line);
  }
  return out;
}

// Words as the shell splits them, quotes removed; a word starting with '#' ends the line.
// `$(...)` is one word, its inside a command of its own.
std::vector<std::string> words(const std::string& line, std::vector<std::string>& nested) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '$' && i + 1 < line.size() && line[i + 1] == '(') {
      int depth = 0;
      std::size_t end = i + 1;
      for (; end < line.size(); ++end) {
        if (line[end] == '(') ++depth;
        if (line[end] == ')' && --depth == 0) break;
      }
      nested.push_back(line.substr(i + 2, end - i - 2));
      word += "SUBSTITUTION";
      in_word = true;
      i = end;
    } else if (c == '\'' || c == '"') {
      const std::size_t end = line.find(c, i + 1);
      const std::string quoted = line.substr(i + 1, end - i - 1);
      if (c == '"') {
        std::vector<std::string> inner;
        (void)words(quoted, inner);  // only for the substitutions inside
        nested.insert(nested.end(), inner.begin(), inner.end());
      }
      word += quoted;
      in_word = true;
      i = end == std::string::npos ? line.size() : end;
    } else if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

// One program's command-line surface at one level, from its --help.
struct Surface {
  std::set<std::string> options;
  std::set<std::string> options_with_value;
  std::set<std::string> subcommands;
  bool takes_positionals = false;  // `kiln run ID` beside `kiln run cancel ID`
};

Surface surface(const std::string& command) {
  static std::map<std::string, Surface> known;
  if (auto it = known.find(command); it != known.end()) return it->second;
  const kiln::testing::Ran help = run(command + " --help");
  Surface s;
  bool in_subcommands = false;
  for (const std::string& line : lines_of(help.output)) {
    if (line.rfind("Positionals:", 0) == 0 || line.rfind("POSITIONALS:", 0) == 0) s.takes_positionals = true;
    if (line.rfind("Subcommands:", 0) == 0 || line.rfind("SUBCOMMANDS:", 0) == 0) {
      in_subcommands = true;
      continue;
    }
    if (!line.empty() && line[0] != ' ') in_subcommands = false;
    std::vector<std::string> ignored;
    const std::vector<std::string> parts = words(line, ignored);
    if (parts.empty()) continue;
    if (in_subcommands) {
      s.subcommands.insert(parts[0]);
      continue;
    }
    std::string names = parts[0];
    for (std::size_t start = 0; start < names.size();) {
      const std::size_t comma = std::min(names.find(',', start), names.size());
      const std::string name = names.substr(start, comma - start);
      if (name.rfind("-", 0) == 0) {
        s.options.insert(name);
        const std::string type = parts.size() > 1 ? parts[1].substr(0, parts[1].find('=')) : "";  // TEXT=default
        const bool takes_value = !type.empty() && std::all_of(type.begin(), type.end(), [](char c) {
                                   return (c >= 'A' && c <= 'Z') || c == ':' || c == '_';
                                 });
        if (takes_value) s.options_with_value.insert(name);
      }
      start = comma + 1;
    }
  }
  known[command] = s;
  return s;
}

const std::set<std::string>& kiln_programs() {
  static const std::set<std::string> programs = {
      "kiln",           "kiln-agent",           "kiln-coordinator", "kiln-sim-chip", "kiln-workload-model",
      "kiln-fleet-sim", "kiln-bench-detection", "kiln-sim-sweep",   "kiln-workload-smoke", "kiln-bench-plan"};
  return programs;
}

bool is_placeholder(const std::string& word) {
  return std::all_of(word.begin(), word.end(), [](char c) { return (c >= 'A' && c <= 'Z') || c == '_' || c == '.'; }) ||
         word == "..." || word.find("SUBSTITUTION") != std::string::npos;
}

// What is wrong with one simple command (no ; && | in it), or "" (also for programs not kiln's).
std::string simple_command_problem(std::vector<std::string> argv) {
  while (!argv.empty() && (argv[0].find('=') != std::string::npos || argv[0] == "exec")) argv.erase(argv.begin());
  if (argv.empty()) return "";
  const std::string program = argv[0];
  if (program.rfind("scripts/", 0) == 0) {
    const fs::path script = fs::path(KILN_SOURCE_DIR) / program;
    if (!fs::exists(script)) return program + " does not exist";
    const std::string text = read_file(script);
    for (std::size_t i = 1; i < argv.size(); ++i) {
      if (argv[i].rfind("--", 0) == 0 && !contains(text, argv[i].substr(0, argv[i].find('=')))) {
        return program + " does not take " + argv[i];
      }
    }
    return "";
  }
  const std::string name = fs::path(program).filename().string();
  if (!kiln_programs().count(name)) return "";
  std::string command = bin(name);
  Surface level = surface(command);
  std::set<std::string> options = level.options;  // those of the levels above count too
  bool descended_all = false;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    std::string word = argv[i];
    word.erase(std::remove_if(word.begin(), word.end(), [](char c) { return c == '[' || c == ']'; }), word.end());
    if (word.empty()) continue;
    if (word.rfind("-", 0) == 0) {
      // A synopsis lists alternatives as --a|--b.
      std::istringstream alternatives(word);
      std::string option;
      bool takes_value = false;
      while (std::getline(alternatives, option, '|')) {
        option = option.substr(0, option.find('='));
        if (option == "--") return "";  // the rest is the workload's
        if (!options.count(option)) return name + " " + command.substr(bin(name).size()) + " has no option " + option;
        takes_value = takes_value || level.options_with_value.count(option) > 0 ||
                      surface(bin(name)).options_with_value.count(option) > 0;
      }
      if (takes_value && word.find('=') == std::string::npos) ++i;
      continue;
    }
    if (descended_all || is_placeholder(word)) {
      descended_all = true;
      continue;
    }
    if (level.subcommands.count(word)) {
      command += " " + word;
      level = surface(command);
      options.insert(level.options.begin(), level.options.end());
      continue;
    }
    if (!level.subcommands.empty() && !level.takes_positionals) return name + ": '" + word + "' is not a subcommand of `" +
                                           command.substr(bin(name).size() - name.size()) + "`";
    descended_all = true;  // a positional argument
  }
  return "";
}

// Splits a command line at ; && || and | (a | inside a word, as in --a|--b, is no pipe).
std::vector<std::string> command_problems(const std::string& line) {
  std::vector<std::string> problems;
  std::vector<std::string> nested;
  std::vector<std::string> argv;
  const auto finish = [&]() {
    if (argv.size() >= 3 && fs::path(argv[0]).filename() == "sh" && argv[1] == "-c") {
      nested.push_back(argv[2]);
    } else if (auto problem = simple_command_problem(argv); !problem.empty()) {
      problems.push_back(problem);
    }
    argv.clear();
  };
  for (std::string word : words(line, nested)) {
    if (word == ";" || word == "&&" || word == "||" || word == "|") {
      finish();
      continue;
    }
    const bool ends = word.size() > 1 && word.back() == ';';
    if (ends) word.pop_back();
    argv.push_back(word);
    if (ends) finish();
  }
  finish();
  for (const std::string& inner : nested) {
    for (const std::string& problem : command_problems(inner)) problems.push_back(problem);
  }
  return problems;
}

}  // namespace

TEST_CASE("every fenced block of the docs says what it is") {
  static const std::set<std::string> kinds = {"toml", "sh", "console", "text", "ini", "json", "c", "cpp", "mermaid"};
  for (const Block& block : blocks()) {
    INFO(block.where);
    CHECK_MESSAGE(kinds.count(block.info) == 1, "give the block a language: toml, sh (commands), console ($ "
                                                "commands and their output), text, ini, json, c, cpp or mermaid");
  }
}

TEST_CASE("every TOML example passes the loader of the file it stands for") {
  int checked = 0;
  for (const Block& block : blocks()) {
    if (block.info != "toml") continue;
    TempDir root("kiln-docs-toml");
    INFO(block.where << " (" << (block.marker.empty() ? "no marker" : block.marker) << ")");
    CHECK(toml_example_problem(block, root.path()) == "");
    ++checked;
  }
  CHECK(checked >= 7);
}

TEST_CASE("every command of the shell examples and unit files names options and subcommands that exist") {
  int checked = 0;
  for (const Block& block : blocks()) {
    // A console example that runs is checked by running it (it may show a mistake on purpose).
    if ((block.info != "sh" && block.info != "console" && block.info != "ini") || block.marker == "runs") continue;
    for (const std::string& line : command_lines(block)) {
      INFO(block.where << ": " << line);
      std::string problems;
      for (const std::string& problem : command_problems(line)) problems += problem + "; ";
      CHECK(problems == "");
      ++checked;
    }
  }
  CHECK(checked >= 40);
}

TEST_CASE("the command checker finds what a doc gets wrong") {
  CHECK(command_problems("kiln nodes --jsn").size() == 1);
  CHECK(command_problems("kiln nods").size() == 1);
  CHECK(command_problems("kiln-agent --config a.toml check-config --verbose").size() == 1);
  CHECK(command_problems("export A=1; kiln --config c.toml diag n07 --level 2 --json").empty());
  CHECK(command_problems("kiln bundle accept \"$(kiln bundle build --att c03 | cut -d' ' -f2)\"").size() == 1);
  CHECK(command_problems("scripts/demo --serve --no-such-flag").size() == 1);
}

TEST_CASE("console examples marked to run print what the doc shows") {
  int ran = 0;
  for (const Block& block : blocks()) {
    if (block.marker != "runs") continue;
    REQUIRE(block.info == "console");
    std::string command;
    std::vector<std::string> shown;
    const auto check = [&]() {
      if (command.empty()) return;
      INFO(block.where << ": $ " << command);
      const kiln::testing::Ran ran_command = run("PATH=" + std::string(KILN_BIN_DIR) + ":$PATH " + command);
      for (const std::string& line : shown) CHECK_MESSAGE(contains(ran_command.output, line), ran_command.output);
      shown.clear();
    };
    for (const std::string& line : lines_of(block.text)) {
      if (line.rfind("$ ", 0) == 0) {
        check();
        command = line.substr(2);
        ++ran;
      } else {
        shown.push_back(line);
      }
    }
    check();
  }
  CHECK(ran >= 1);
}
