#include <stdio.h>
#include "greet.h"
#ifdef FIXTURE_BREAK
#error the fixture was asked to break
#endif
int main(void) { puts(greet()); return 0; }
