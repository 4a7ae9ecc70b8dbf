#include <gtest/gtest.h>
TEST(T, T) {}
