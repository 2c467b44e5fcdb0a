// A small environments repository as text, for the release core's tests.
#pragma once

#include <map>
#include <string>

namespace kiln::testing {

inline std::string bundle_id(char c) { return std::string(64, c); }

inline std::string bundle_text(const std::string& id, const std::string& firmware = "fw-2.1",
                               const std::string& extra = "") {
  std::string text = "id = \"" + id + "\"\nhardware_revisions = [\"a\", \"b\"]\nmodel_configs_version = \"mc-7\"\n" + extra;
  for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
    const std::string version = std::string(layer) == "firmware" ? firmware : std::string(layer) + "-1";
    text += "[layers." + std::string(layer) + "]\nversion = \"" + version + "\"\ndigest = \"sha256:" +
            std::string(64, 'd') + "\"\n";
  }
  text += "[[model]]\nname = \"llm-70b\"\nbatch_size = 8\nprecision = \"bf16\"\ntensor_parallel = 8\n";
  return text;
}

inline std::map<std::string, std::string> repo_files(const std::string& dev_bundle, const std::string& staging_bundle) {
  return {
      {"bundles/" + bundle_id('a') + ".toml", bundle_text(bundle_id('a'))},
      {"bundles/" + bundle_id('b') + ".toml", bundle_text(bundle_id('b'))},
      {"bundles/" + bundle_id('c') + ".toml",
       bundle_text(bundle_id('c'), "fw-3.0", "one_way_firmware = \"blows anti-rollback fuse 4\"\n")},
      {"bundles/" + bundle_id('e') + ".toml", bundle_text(bundle_id('e'), "fw-0.9")},
      {"environments/dev.toml", "# dev\nbundle = \"" + dev_bundle + "\"\nrequires = [\"nightly\"]\nnodes = [\"n01\"]\n"},
      {"environments/staging.toml", "bundle = \"" + staging_bundle +
                                        "\"\nfollows = \"dev\"\nrequires = [\"nightly\"]\nnodes = [\"n02\", \"n03\"]\n"},
      {"environments/production.toml",
       "bundle = \"\"\nfollows = \"staging\"\nrequires = [\"release\"]\nsoak_hours = 48\nnode_labels = "
       "[\"pool=prod\"]\neval_threshold = 0.99\n[eval_thresholds]\n\"llm-70b\" = 0.995\n"},
      {"compatibility.toml",
       "[[combination]]\nhardware_revision = \"a\"\nfirmware = [\"fw-2.*\", \"fw-3.0\"]\ndriver = [\"*\"]\nruntime = "
       "[\"runtime-1\"]\n[[combination]]\nhardware_revision = \"b\"\nfirmware = [\"fw-2.*\", \"fw-3.0\"]\ndriver = "
       "[\"driver-1\"]\nruntime = [\"*\"]\n"},
      {"README.md", "not read"},
  };
}

}  // namespace kiln::testing
