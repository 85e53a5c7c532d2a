#include "greet.h"
const char * greet(void) { return "hello from the fixture"; }
