#include <assert.h>
#include "greet.h"

/* __FILE__ reaches the binary: a sandbox path would make two builds of the same source differ. */
const char *greeting(void) {
    assert(__FILE__[0] != '\0');
    return __FILE__;
}
