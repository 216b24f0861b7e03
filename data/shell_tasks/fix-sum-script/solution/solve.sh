cat sum.sh
sed -i 's/total - n/total + n/' sum.sh
sh sum.sh
