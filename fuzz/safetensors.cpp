// .safetensors reader: the names listing, then the only tensor, then the first one named.
#include "common/numerics/tensor_io.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(safetensors) {
  using namespace kiln::numerics;
  const std::string_view file = kiln::fuzz::as_text(data, size);
  const ReadOptions options;
  auto names = safetensors_names(file, options);
  (void)parse_safetensors(file, options);
  if (!names || names->empty()) return 0;
  ReadOptions named;
  named.tensor_name = names->front();
  auto tensor = parse_safetensors(file, named);
  if (tensor && static_cast<std::int64_t>(tensor->values.size()) != element_count(tensor->shape)) {
    kiln::fuzz::violated("the tensor read has a different number of values than its shape says");
  }
  return 0;
}
