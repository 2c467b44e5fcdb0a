// The workloads a fleet can run, by name, with the kernels ("components") each uses: what a
// qualification set's `workload` and `components` are checked against, so a typo cannot silently
// deselect a model. The catalog is data handed in by the shell, never a dependency on whatever
// computes the workloads: the sim provides one (sim/workloads/catalog.h), and a production fleet
// gives the document its workload program prints (`kiln-workload-model --list --json` is the
// sim's), through `workload_catalog` in qualifier.toml.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "qualification/model_set.h"

namespace kiln::qualification {

struct CatalogWorkload {
  std::string name;                     // what a [[model]]'s `workload` names
  std::vector<std::string> components;  // the kernels it runs
};

class WorkloadCatalog {
 public:
  // `source` says where the list came from, in errors ("the sim's workloads", a file's path).
  WorkloadCatalog(std::string source, std::vector<CatalogWorkload> workloads);

  const CatalogWorkload* find(std::string_view name) const;
  const std::vector<CatalogWorkload>& workloads() const { return workloads_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<CatalogWorkload> workloads_;
};

// {"models": [{"name": ..., "components": [...]}, ...]}: the shape `kiln-workload-model --list
// --json` prints; other fields are ignored. Names unique and non-empty.
Result<WorkloadCatalog> parse_workload_catalog(std::string_view json_text, std::string_view source);
Result<WorkloadCatalog> load_workload_catalog_file(const std::filesystem::path& path);

// Every model's workload is in the catalog and every component it declares is one that workload
// uses. Models without a workload are not checked.
Status check_workloads(const ModelSet& set, const WorkloadCatalog& catalog);

}  // namespace kiln::qualification
