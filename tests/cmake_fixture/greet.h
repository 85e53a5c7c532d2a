const char * greet(void);
