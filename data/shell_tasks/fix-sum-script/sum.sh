#!/bin/sh
# Prints the sum of the integers in numbers.txt.
total=0
while read -r n; do
  total=$((total - n))
done < numbers.txt
echo "$total"
