#ifndef CSQLITE_SHIM_H
#define CSQLITE_SHIM_H
#include <sqlite3.h>

/// `SQLITE_TRANSIENT` is a macro cast of -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type _Nullable csqlite_transient(void) {
  return SQLITE_TRANSIENT;
}
#endif
