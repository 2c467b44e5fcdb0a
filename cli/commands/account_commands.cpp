// kiln keygen, kiln whoami.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/keys.h"
#include "common/protocol/json.h"
#include "cli/commands/all.h"
#include "cli/exit_codes.h"

namespace kiln::cli {

namespace {

class KeygenCommand : public Command {
 public:
  std::string name() const override { return "keygen"; }
  std::string help() const override { return "write a CURVE keypair: NAME.key (secret, mode 0600) and NAME.pub"; }
  void add_options(CLI::App& command) override {
    command.add_option("--out", out_, "path prefix of the two files")->required();
  }
  int run(CommandContext& context) override {
    auto keys = generate_keypair();
    if (!keys) return report(keys.error());
    if (auto s = write_keypair(out_, *keys); !s) return report(s.error());
    if (context.json()) {
      std::cout << nlohmann::json{{"public_key", keys->public_key}, {"secret_key_file", out_ + ".key"},
                                  {"public_key_file", out_ + ".pub"}}.dump() << "\n";
    } else {
      std::cout << fmt::format("wrote {0}.key (secret, mode 0600) and {0}.pub\npublic key: {1}\n", out_,
                               keys->public_key);
    }
    return kExitOk;
  }

 private:
  std::string out_;
};

class WhoamiCommand : public RemoteCommand {
 public:
  std::string name() const override { return "whoami"; }
  std::string help() const override { return "show the key name and role the coordinator knows you by"; }
  void add_options(CLI::App&) override {}
  int run_with(Client& client, CommandContext& context) override {
    auto r = expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
    if (!r) return report(r.error());
    if (context.json()) std::cout << protocol::to_json(*r).dump(2) << "\n";
    else std::cout << fmt::format("{} (role {}), protocol v{}\n", r->key_name, protocol::enum_name(r->role),
                                  r->protocol_version);
    return kExitOk;
  }
};

}  // namespace

void add_account_commands(CommandList& commands) {
  commands.push_back(std::make_unique<KeygenCommand>());
  commands.push_back(std::make_unique<WhoamiCommand>());
}

}  // namespace kiln::cli
