// SwiftPM links an executable target with `main` aliased to `<module>_main`, the symbol Swift top-level code
// would define. The fuzz target has no top-level code (it is built with -parse-as-library), so this provides that
// symbol and hands control to libFuzzer's driver (LLVMFuzzerRunDriver, in libclang_rt.fuzzer, which
// -sanitize=fuzzer links) with the Swift LLVMFuzzerTestOneInput.
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int meshgate_fuzz_main(int argc, char **argv) {
  return LLVMFuzzerRunDriver(&argc, &argv, LLVMFuzzerTestOneInput);
}
