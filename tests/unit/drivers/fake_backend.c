/* Broken driver backends that the loader must refuse; one is built per FAKE_* definition. */
#include <stddef.h>

#include "drivers/kiln_driver.h"

#if defined(FAKE_ONLY_V2)
/* Implements only a future ABI: asked for version 1, it answers NULL. */
KILN_DRIVER_EXPORT const struct kiln_driver_api* kiln_driver_entry(uint32_t requested_abi_version) {
  static const struct kiln_driver_api api = {.abi_version = 2u,
                                             .table_size = sizeof(struct kiln_driver_api)};
  return requested_abi_version == 2u ? &api : NULL;
}
#elif defined(FAKE_WRONG_VERSION)
/* Ignores the requested version and hands back its own. */
KILN_DRIVER_EXPORT const struct kiln_driver_api* kiln_driver_entry(uint32_t requested_abi_version) {
  static const struct kiln_driver_api api = {.abi_version = 2u,
                                             .table_size = sizeof(struct kiln_driver_api)};
  (void)requested_abi_version;
  return &api;
}
#elif defined(FAKE_INCOMPLETE)
/* Claims version 1 but leaves every function out. */
KILN_DRIVER_EXPORT const struct kiln_driver_api* kiln_driver_entry(uint32_t requested_abi_version) {
  static const struct kiln_driver_api api = {.abi_version = KILN_DRIVER_ABI_VERSION,
                                             .table_size = sizeof(struct kiln_driver_api)};
  return requested_abi_version == KILN_DRIVER_ABI_VERSION ? &api : NULL;
}
#else
/* A shared library that is no driver at all. */
KILN_DRIVER_EXPORT int kiln_fake_not_a_driver(void) { return 0; }
#endif
