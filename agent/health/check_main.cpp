// kiln-agent-check: the hidden helper that runs one health check in its own process, so the
// agent can kill it at its deadline when a wedged chip never answers. It loads the driver,
// reads what the check needs and prints one reading line (check_reading.h); judging it is the
// caller's job. Exit code 0 when a reading was printed (even one that carries a driver error),
// 2 for bad arguments.
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "agent/health/check_reading.h"
#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{"Runs one kiln health check and prints its reading (used by kiln-agent)"};
  app.set_version_flag("--version", kiln::version_text("kiln-agent-check"));
  std::string driver;
  std::string options;
  std::string check_name;
  std::uint32_t level = 1;
  std::optional<std::uint32_t> chip;
  app.add_option("--driver", driver, "chip driver library")->required();
  app.add_option("--options", options, "driver options string");
  app.add_option("--check", check_name,
                 "driver, chip_firmware, telemetry, memory, interconnect or compute")
      ->required();
  app.add_option("--level", level, "self-test level 1 to 3")->check(CLI::Range(1, 3));
  app.add_option("--chip", chip, "chip index");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }

  auto kind = kiln::agent::health::parse_check_kind(check_name);
  if (!kind) {
    std::cerr << "kiln-agent-check: " << kind.error().describe() << "\n";
    return 2;
  }
  if (kiln::agent::health::needs_chip(*kind) != chip.has_value()) {
    std::cerr << "kiln-agent-check: the " << check_name << " check "
              << (chip ? "takes no --chip" : "needs --chip N") << "\n";
    return 2;
  }
  const auto reading = kiln::agent::health::take_reading(driver, options, *kind, chip, level);
  std::cout << "\n" << kiln::agent::health::kReadingMarker
            << kiln::agent::health::reading_to_json(reading) << std::endl;
  return 0;
}
